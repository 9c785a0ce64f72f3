"""Upstream git: a repository read with pygit2 (:mod:`.repo`), a bundle made a bare repository with
dulwich (:mod:`.bundle`), a commit's tree diff and change hunks (:mod:`.diffs`), the forked diff worker
of a ``--history`` ingest (:mod:`.diff_worker`), the walk of a history (:mod:`.history`) and a run's
blobs and state (:mod:`.run`).

A reader of repositories: no database access here. The ingest stage (:mod:`dropscan.stages.ingest_git`)
hands it the store's pack writers (:class:`.diffs.Pack`) and stores what it reads.
"""
