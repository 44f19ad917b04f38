"""A run's configuration and life: its options (config, run_config, flags), the settings a
running run may change (settings, live_settings), opening it new, resumed or forked (start,
session, fork), and what makes two runs comparable (manifest)."""
