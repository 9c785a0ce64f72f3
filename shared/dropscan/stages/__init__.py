"""The stages of a scan, one module per function of the template: unpack, lookup, finalize, triage,
notify; ingest of upstream releases; the scheduled sweep. Each is a short list of steps that call down
into ``store`` (data access), ``archive`` (reading archives) and ``audit`` (pure rules)."""
