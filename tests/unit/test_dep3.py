"""What a distribution's patch series states of itself (DEP-3 and git format-patch headers)."""

from __future__ import annotations

from dropscan.audit.dep3 import parse, series_names, statements

FORMAT_PATCH = b"""From 96f71bb00b5b7bcf3e09bfa6b3c291eb3944de9d Mon Sep 17 00:00:00 2001
From: A Packager <a@example.org>
Date: Mon, 30 Sep 2024 09:01:19 +0300
Subject: [PATCH] buildsys: resurrect PLATFORM_LINUX and depend on it for
 linux-specific applets

This effectively reverts the following two commits:

  commit e3b1a1fd28558f7a1b3c0ec33313bedb675be8a1
  commit 5c69ad0ecdc18cf51b312c7c82848f4438fe1c8d

---
 Config.in | 1 +
diff --git a/Config.in b/Config.in
--- a/Config.in
+++ b/Config.in
@@ -1,0 +2 @@
+source .platform.in
--- a/libbb/Config.src
+++ b/libbb/Config.src
@@ -1,0 +2 @@
+\tdepends on PLATFORM_LINUX
"""

DEP3 = b"""Description: skip non-existing devices in inittab
Origin: upstream mailinglist,
 http://lists.example.org/2024-September/090899.html
Applied-Upstream: 1.38.0, commit:0123456789abcdef
Forwarded: yes

--- a/init/init.c
+++ b/init/init.c
@@ -1 +1 @@
-a
+b
"""


def test_a_format_patch_header_gives_its_commit_subject_files_and_the_commits_it_reverts() -> None:
    info = parse("platform-linux.diff", FORMAT_PATCH)
    assert info.commit == "96f71bb00b5b7bcf3e09bfa6b3c291eb3944de9d"
    assert info.subject == "buildsys: resurrect PLATFORM_LINUX and depend on it for linux-specific applets"
    assert info.reverts == [
        "e3b1a1fd28558f7a1b3c0ec33313bedb675be8a1",
        "5c69ad0ecdc18cf51b312c7c82848f4438fe1c8d",
    ]
    assert info.files == ["Config.in", "libbb/Config.src"]


def test_dep3_fields_are_read_with_their_continuation_lines_and_nothing_is_said_reverted() -> None:
    info = parse("init-console.patch", DEP3)
    assert info.subject == "skip non-existing devices in inittab"
    assert (
        info.fields["origin"] == "upstream mailinglist, http://lists.example.org/2024-September/090899.html"
    )
    assert info.fields["applied-upstream"] == "1.38.0, commit:0123456789abcdef"
    assert info.reverts == [] and info.files == ["init/init.c"]


def test_the_series_in_order_without_comments_names_each_file_s_patches() -> None:
    series = b"# disabled:\n# old.patch\nplatform-linux.diff\ninit-console.patch -p1\n\nmissing.patch\n"
    assert series_names(series) == ["platform-linux.diff", "init-console.patch", "missing.patch"]
    said = statements(series, {"platform-linux.diff": FORMAT_PATCH, "init-console.patch": DEP3})
    assert [s["patch"] for s in said["Config.in"]] == ["platform-linux.diff"]
    assert said["init/init.c"][0]["applied_upstream"] == "1.38.0, commit:0123456789abcdef"
    assert said["libbb/Config.src"][0]["states_reverts"][0].startswith("e3b1a1fd")
