"""The schema of the run file, as an append-only list of migrations.

``MIGRATIONS[i]`` takes a file from ``PRAGMA user_version = i`` to ``i + 1``.
A migration is frozen once released: never edit one, append a new one. Each
only adds (tables, columns, indices) or fills new columns from data already
there, so upgrading never loses data; ``store.db.migrate`` runs each in one
transaction together with its ``user_version`` bump, so a crash mid-migration
leaves the file at the previous version.

Version 1 is the first schema (issue 2): runs, steps, groups, trajectories,
events and commands. Version 2 (issue 3) adds multi-step turns, the judge,
reward-function versions, checkpoints, crash detection fields and the hot
metric columns of ``steps``. Version 3 adds a covering index for step series; version 4 gives turns their
run and step; version 5 keeps each group's dataset example; version 6 gives
runs a kind (train / eval / select) and the summary of an eval or select run;
version 8 records each judge call's response mode and attempts; version 9
each turn's environment reward; version 10 each trajectory's success and
each step's success rate and held-out mean reward; version 11 a fork's
parent run and fork step; version 12 tool calls (a trajectory's count, and
each call: its turn, name, arguments, result or error, seconds) and why a
checkpoint was taken off its schedule.

Units: every ``*_at`` column is Unix time in seconds (REAL); ``*_tokens``
columns count tokens; ``latency_s`` and ``step_seconds`` are seconds. JSON
columns hold UTF-8 JSON text. ``example_id`` and ``turns.anchor_id`` have no
type affinity, so integer ids stay integers and string ids stay strings. ``groups`` is an SQL keyword in recent SQLite,
so SQL always quotes it.
"""

V1 = [
    """CREATE TABLE runs (
        id INTEGER PRIMARY KEY,
        name TEXT NOT NULL UNIQUE,
        scenario TEXT NOT NULL,
        config TEXT NOT NULL DEFAULT '{}',
        status TEXT NOT NULL,
        created_at REAL NOT NULL,
        ended_at REAL
    )""",
    """CREATE TABLE steps (
        id INTEGER PRIMARY KEY,
        run_id INTEGER NOT NULL REFERENCES runs(id),
        step INTEGER NOT NULL,
        reward REAL,
        reward_std REAL,
        frac_reward_zero_std REAL,
        kl REAL,
        entropy REAL,
        clip_ratio REAL,
        completions_mean_length REAL,
        loss REAL,
        grad_norm REAL,
        metrics TEXT NOT NULL DEFAULT '{}',
        UNIQUE (run_id, step)
    )""",
    """CREATE TABLE "groups" (
        id INTEGER PRIMARY KEY,
        run_id INTEGER NOT NULL REFERENCES runs(id),
        step INTEGER NOT NULL,
        idx INTEGER NOT NULL,
        example_id,
        prompt TEXT NOT NULL
    )""",
    'CREATE INDEX groups_run_step ON "groups"(run_id, step)',
    """CREATE TABLE trajectories (
        id INTEGER PRIMARY KEY,
        group_id INTEGER NOT NULL REFERENCES "groups"(id),
        run_id INTEGER NOT NULL,
        step INTEGER NOT NULL,
        idx INTEGER NOT NULL,
        messages TEXT NOT NULL DEFAULT '[]',
        completion TEXT NOT NULL,
        prompt_tokens INTEGER NOT NULL DEFAULT 0,
        completion_tokens INTEGER NOT NULL DEFAULT 0,
        reward REAL,
        components TEXT NOT NULL DEFAULT '{}',
        details TEXT NOT NULL DEFAULT '{}',
        advantage REAL,
        truncated INTEGER NOT NULL DEFAULT 0
    )""",
    "CREATE INDEX trajectories_group ON trajectories(group_id, idx)",
    "CREATE INDEX trajectories_run ON trajectories(run_id)",
    """CREATE TABLE events (
        id INTEGER PRIMARY KEY,
        run_id INTEGER NOT NULL REFERENCES runs(id),
        step INTEGER,
        kind TEXT NOT NULL,
        payload TEXT NOT NULL DEFAULT '{}',
        created_at REAL NOT NULL
    )""",
    "CREATE INDEX events_run ON events(run_id)",
    """CREATE TABLE commands (
        id INTEGER PRIMARY KEY,
        run_id INTEGER NOT NULL REFERENCES runs(id),
        kind TEXT NOT NULL,
        payload TEXT NOT NULL DEFAULT '{}',
        status TEXT NOT NULL DEFAULT 'pending',
        message TEXT,
        created_at REAL NOT NULL,
        resolved_at REAL
    )""",
    "CREATE INDEX commands_run_status ON commands(run_id, status)",
]

RUN_FILE_TABLES = ("runs", "steps", "groups", "trajectories", "events", "commands")
"""The tables every run file holds from schema version 1 on (V1 makes them; later migrations only add):
with ``runs``' columns of V1 (:data:`RUN_FILE_COLUMNS`), what tells our file from another application's."""
RUN_FILE_COLUMNS = ("id", "name", "scenario", "config", "status", "created_at")

V2 = [
    # runs: manifest, crash detection (pid on host, heartbeat), progress.
    "ALTER TABLE runs ADD COLUMN manifest TEXT NOT NULL DEFAULT '{}'",
    "ALTER TABLE runs ADD COLUMN pid INTEGER",
    "ALTER TABLE runs ADD COLUMN host TEXT",
    "ALTER TABLE runs ADD COLUMN heartbeat_at REAL",
    "ALTER TABLE runs ADD COLUMN last_step INTEGER",
    "ALTER TABLE runs ADD COLUMN reward_file TEXT",
    "UPDATE runs SET last_step = (SELECT MAX(step) FROM steps WHERE steps.run_id = runs.id)",
    # steps: more hot metric columns, filled from the metrics JSON of v1 rows.
    "ALTER TABLE steps ADD COLUMN reward_min REAL",
    "ALTER TABLE steps ADD COLUMN reward_max REAL",
    "ALTER TABLE steps ADD COLUMN step_seconds REAL",
    "ALTER TABLE steps ADD COLUMN eval_pass_at_1 REAL",
    "ALTER TABLE steps ADD COLUMN judge_tau REAL",
    "ALTER TABLE steps ADD COLUMN created_at REAL",
    """UPDATE steps SET
        reward_min = json_extract(metrics, '$.reward_min'),
        reward_max = json_extract(metrics, '$.reward_max'),
        step_seconds = json_extract(metrics, '$.step_seconds'),
        eval_pass_at_1 = json_extract(metrics, '$."eval/pass_at_1"'),
        judge_tau = json_extract(metrics, '$."judge/tau"')""",
    # groups: multi-step initial state, judge outcome, resume bookkeeping.
    'ALTER TABLE "groups" ADD COLUMN initial_state_key TEXT',
    'ALTER TABLE "groups" ADD COLUMN judge_status TEXT',
    'ALTER TABLE "groups" ADD COLUMN judge_error TEXT',
    'ALTER TABLE "groups" ADD COLUMN superseded INTEGER NOT NULL DEFAULT 0',
    # trajectories: judge output, reward version, parse status column.
    "ALTER TABLE trajectories ADD COLUMN parse_status TEXT",
    "ALTER TABLE trajectories ADD COLUMN reward_version INTEGER",
    "ALTER TABLE trajectories ADD COLUMN judge_score REAL",
    "ALTER TABLE trajectories ADD COLUMN judge_rank INTEGER",
    "ALTER TABLE trajectories ADD COLUMN judge_explanation TEXT",
    "UPDATE trajectories SET parse_status = json_extract(details, '$.parse_status')",
    """CREATE TABLE turns (
        id INTEGER PRIMARY KEY,
        trajectory_id INTEGER NOT NULL REFERENCES trajectories(id),
        t INTEGER NOT NULL,
        state_key TEXT,
        reward REAL,
        ret REAL,
        adv_episode REAL,
        adv_step REAL,
        advantage REAL,
        anchor_id,
        anchor_size INTEGER
    )""",
    "CREATE INDEX turns_trajectory ON turns(trajectory_id, t)",
    """CREATE TABLE judge_calls (
        id INTEGER PRIMARY KEY,
        run_id INTEGER NOT NULL REFERENCES runs(id),
        group_id INTEGER REFERENCES "groups"(id),
        step INTEGER,
        request_hash TEXT NOT NULL,
        model TEXT NOT NULL,
        raw_response TEXT,
        latency_s REAL,
        prompt_tokens INTEGER NOT NULL DEFAULT 0,
        completion_tokens INTEGER NOT NULL DEFAULT 0,
        cost_usd REAL,
        error TEXT,
        created_at REAL NOT NULL
    )""",
    "CREATE INDEX judge_calls_run ON judge_calls(run_id)",
    "CREATE INDEX judge_calls_hash ON judge_calls(request_hash)",
    """CREATE TABLE reward_versions (
        id INTEGER PRIMARY KEY,
        run_id INTEGER NOT NULL REFERENCES runs(id),
        version INTEGER NOT NULL,
        sha256 TEXT NOT NULL,
        source TEXT NOT NULL,
        weights TEXT NOT NULL DEFAULT '{}',
        created_at REAL NOT NULL,
        UNIQUE (run_id, version)
    )""",
    """CREATE TABLE checkpoints (
        id INTEGER PRIMARY KEY,
        run_id INTEGER NOT NULL REFERENCES runs(id),
        step INTEGER NOT NULL,
        path TEXT NOT NULL,
        created_at REAL NOT NULL
    )""",
    "CREATE INDEX checkpoints_run_step ON checkpoints(run_id, step)",
    "CREATE INDEX runs_status ON runs(status)",
]

V3 = [
    # Covering index for the plots: a step series is read from the index
    # alone, without one table lookup per step (10,000-step series).
    "CREATE INDEX steps_series ON steps(run_id, step, reward, reward_std, reward_min, "
    "reward_max, frac_reward_zero_std, kl, entropy, clip_ratio, completions_mean_length, loss, "
    "grad_norm, step_seconds, eval_pass_at_1, judge_tau)",
]

V4 = [
    # turns carry their run and step (denormalised, as trajectories do), so
    # per-step turn statistics read one run's turns through an index instead
    # of scanning every turn in the file.
    "ALTER TABLE turns ADD COLUMN run_id INTEGER",
    "ALTER TABLE turns ADD COLUMN step INTEGER",
    "UPDATE turns SET (run_id, step) = (SELECT t.run_id, t.step FROM trajectories t "
    "WHERE t.id = turns.trajectory_id)",
    "CREATE INDEX turns_run_step ON turns(run_id, step)",
]

V5 = [
    # The whole dataset example (JSON), so a reward edit can be dry-run on
    # stored groups: rubrics read fields such as ``answer``.
    "ALTER TABLE \"groups\" ADD COLUMN example TEXT",
]

V6 = [
    # Loops A and B (issue 15) record their runs next to training runs: the
    # kind tells them apart (every older run trained); the summary holds an
    # eval or select run's n, pass@1, mean reward and pass@k (JSON).
    "ALTER TABLE runs ADD COLUMN kind TEXT NOT NULL DEFAULT 'train'",
    "ALTER TABLE runs ADD COLUMN summary TEXT NOT NULL DEFAULT '{}'",
]

V7 = [
    # Per-token log-probs of the sampled tokens (float16) and where each
    # token ends in the completion (uint32): store/tokens.py.
    "ALTER TABLE trajectories ADD COLUMN token_logprobs BLOB",
    "ALTER TABLE trajectories ADD COLUMN token_ends BLOB",
]

V8 = [
    # Per judge call, how it asked for JSON (json_schema / prompt / cache:
    # engine.rewards.judge.ruler.RESPONSE_MODES) and how many requests it
    # took, so a small local judge that needs the prompt fallback or many
    # retries shows on the judge line; an index to read a group's call.
    "ALTER TABLE judge_calls ADD COLUMN response_mode TEXT",
    "ALTER TABLE judge_calls ADD COLUMN attempts INTEGER",
    "CREATE INDEX judge_calls_group ON judge_calls(group_id)",
]

V9 = [
    # The environment's own reward of each turn (after the invalid-move penalty), so
    # a reward edit re-scored outside the run (the editor's preview, the group
    # view's version compare) gives ``env_reward`` what the run gave it, not 0.
    "ALTER TABLE turns ADD COLUMN env_reward REAL",
]

V10 = [
    # Whether each trajectory solved its task by the run's declared success
    # function (engine.rewards.success): 1, 0, or NULL (no verdict: an errored score,
    # or a run stored before v10 / imported, which readers judge by
    # reward >= 1, the old rule).
    "ALTER TABLE trajectories ADD COLUMN success INTEGER",
    # The success rate of each step's rollouts and the held-out mean reward
    # beside held-out pass@1, as hot columns (the dashboard plots success
    # and reward side by side), filled from the metrics JSON, and the
    # covering index of the step series rebuilt with them.
    "ALTER TABLE steps ADD COLUMN success_rate REAL",
    "ALTER TABLE steps ADD COLUMN eval_reward REAL",
    """UPDATE steps SET success_rate = json_extract(metrics, '$."success_rate"'),
        eval_reward = json_extract(metrics, '$."eval/reward"')""",
    "DROP INDEX steps_series",
    "CREATE INDEX steps_series ON steps(run_id, step, reward, reward_std, reward_min, "
    "reward_max, frac_reward_zero_std, kl, entropy, clip_ratio, completions_mean_length, loss, "
    "grad_norm, step_seconds, eval_pass_at_1, judge_tau, success_rate, eval_reward)",
]

V11 = [
    # A fork (`rlab fork RUN@STEP`) is a run started from another run's
    # checkpoint: its parent and the step it forked at, so `rlab runs` draws
    # the tree and a checkpoint a fork started from is never pruned.
    "ALTER TABLE runs ADD COLUMN parent_id INTEGER REFERENCES runs(id)",
    "ALTER TABLE runs ADD COLUMN fork_step INTEGER",
    "CREATE INDEX runs_parent ON runs(parent_id, fork_step)",
]

V12 = [
    # Tool tasks (issue 45): each trajectory's number of tool calls (NULL: no tools were
    # offered), and every call with what came back and how long it took.
    "ALTER TABLE trajectories ADD COLUMN tool_calls INTEGER",
    """CREATE TABLE tool_calls (
        id INTEGER PRIMARY KEY,
        trajectory_id INTEGER NOT NULL REFERENCES trajectories(id),
        run_id INTEGER NOT NULL,
        step INTEGER NOT NULL,
        turn INTEGER NOT NULL,
        idx INTEGER NOT NULL,
        call_id TEXT NOT NULL,
        name TEXT NOT NULL,
        arguments TEXT NOT NULL DEFAULT '{}',
        result TEXT NOT NULL DEFAULT '',
        error TEXT,
        seconds REAL NOT NULL DEFAULT 0
    )""",
    "CREATE INDEX tool_calls_trajectory ON tool_calls(trajectory_id, turn, idx)",
    "CREATE INDEX tool_calls_run_step ON tool_calls(run_id, step)",
    # Why a checkpoint was taken off its schedule (an alert, a reward edit, a setting change):
    # the points a fork tests a fix from, never pruned. NULL: on --checkpoint-every's schedule.
    "ALTER TABLE checkpoints ADD COLUMN reason TEXT",
]

V13 = [
    # Per sampled token, its log-prob under the trained policy at the update (float16, as
    # token_logprobs): the inspector shades each token by the sampler's mismatch (issue 48).
    "ALTER TABLE trajectories ADD COLUMN token_policy_logprobs BLOB",
]

MIGRATIONS: list[list[str]] = [V1, V2, V3, V4, V5, V6, V7, V8, V9, V10, V11, V12, V13]
SCHEMA_VERSION = len(MIGRATIONS)
