"""Upstream git: a repository read with pygit2 (:mod:`.repo`) and a bundle made a bare repository with
dulwich (:mod:`.bundle`). A reader of repositories: no database access here; the ingest stage
(:mod:`dropscan.stages.ingest_git`) stores what it reads.
"""
