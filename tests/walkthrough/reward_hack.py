"""The reward-hacking story, played in tmux on the embedded policy from a fresh start.

    python tests/walkthrough/reward_hack.py [--workdir DIR] [--threshold 0.2] [--within 20]

Not part of the test run (it takes several minutes and needs tmux). It:

1. starts ``rlab run --scenario reward_hacking`` (TUI + engine) in a
   detached tmux session, in a fresh directory;
2. waits until the TUI's alerts panel shows ``hack`` or ``length_drift``
   (the hack taking hold: hedged completions such as "57 67 47" are paid
   and longer);
3. presses ``space`` (pause), unless an alert in ``pause_on`` paused the
   run already, and waits for the run to be paused;
4. presses ``e`` (reward editor) and writes the scenario's
   ``rewards_fixed.py`` over the run's reward file, as another editor would;
   waits for the check and the dry-run diff on screen and keeps it;
5. presses ``ctrl+o`` (apply), ``escape`` (back), ``space`` (resume);
6. follows the run until the share of hedged completions in a step falls
   below ``--threshold`` within ``--within`` steps of the reward edit.

Prints one JSON object: the steps of the alert, pause and edit, the hedged
share and mean reward per step, the dry-run screen, and ``ok``. Exit status
0 when the share fell below the threshold in time, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rlab.scenarios.reward_hacking import SCENARIO, hedged_share
from rlab.store.control import send_command

HACK_ALERTS = ("hack:", "length_drift")
"""The alerts panel's lines that name hedging (``kind: message``): the policy paid for lists of
candidates (a hack: reward up, success down) whose completions grow longer (length drift)."""
SESSION = "rlab-walkthrough"
RUN = "walk"


def tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], capture_output=True, text=True, check=True).stdout


def screen() -> str:
    return tmux("capture-pane", "-p", "-t", SESSION)


def keys(*names: str) -> None:
    for name in names:
        tmux("send-keys", "-t", SESSION, name)
        time.sleep(0.5)


def wait(what: str, predicate, timeout_s: float):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    raise TimeoutError(f"gave up after {timeout_s:g} s waiting for {what}; screen:\n{screen()}")


def query(db: Path, sql: str, params=()) -> list[tuple]:
    if not db.exists():
        return []
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    try:
        return conn.execute(sql, params).fetchall()
    except sqlite3.OperationalError:  # tables not created yet
        return []
    finally:
        conn.close()


def per_step(db: Path) -> dict[int, dict]:
    """Hedged share and mean reward of every stored step."""
    rows = query(db, "SELECT step, completion, reward FROM trajectories ORDER BY step")
    steps: dict[int, list] = {}
    for step, completion, reward in rows:
        steps.setdefault(step, []).append((completion, reward))
    return {s: {"hedged": round(hedged_share([c for c, _ in v]), 3),
                "reward": round(sum(r for _, r in v) / len(v), 3)} for s, v in steps.items()}


def run_status(db: Path) -> str | None:
    rows = query(db, "SELECT status FROM runs WHERE name = ?", [RUN])
    return rows[0][0] if rows else None


def play(workdir: Path, threshold: float, within: int) -> dict:
    db = workdir / "walk.db"
    rlab = Path(sys.executable).with_name("rlab")
    # One torch thread: on a shared 2-core machine two spinning threads per process cost 10x.
    tmux("new-session", "-d", "-s", SESSION, "-x", "200", "-y", "60", "-c", str(workdir),
         f"OMP_NUM_THREADS=1 {rlab} run --scenario reward_hacking --db {db} --name {RUN} --eval-size 100")
    t0 = time.monotonic()
    alert_line = wait("an alert naming the hack", lambda: next(
        (line for line in screen().splitlines() if any(kind in line for kind in HACK_ALERTS)), None), 900)
    if run_status(db) != "paused":  # an alert in pause_on may have paused it already: space would resume it
        keys("Space")
    wait("the pause", lambda: run_status(db) == "paused", 120)
    paused_at = query(db, "SELECT step FROM events WHERE kind = 'pause' ORDER BY id DESC LIMIT 1")[0][0]
    alerts = query(db, "SELECT step, json_extract(payload, '$.alert') FROM events WHERE kind = 'alert' ORDER BY id")
    keys("e")
    wait("the reward editor", lambda: "Apply" in screen(), 60)
    shutil.copyfile(SCENARIO.fixed_reward_file, workdir / "rlab_runs" / db.name / RUN / "rewards.py")
    dry_run = wait("the dry run", lambda: s if "mean reward  old" in (s := screen()) else None, 120)
    keys("C-o")
    wait("applied", lambda: "✓ applied" in screen(), 30)
    keys("Escape", "Escape")
    wait("the dashboard", lambda: "Edit rewards" in screen(), 30)
    keys("Space")
    wait("the edit", lambda: query(db, "SELECT step FROM events WHERE kind = 'reward_edit'"), 180)
    edit_step = query(db, "SELECT step FROM events WHERE kind = 'reward_edit'")[0][0]

    def recovered():
        steps = per_step(db)
        done = [s for s in steps if edit_step <= s <= edit_step + within and steps[s]["hedged"] < threshold]
        return min(done) if done else (max(steps) > edit_step + within and -1)

    below_at = wait("the recovery", recovered, 900)
    return {"ok": below_at > 0, "threshold": threshold, "within_steps": within,
            "alert": alert_line.strip(), "alerts_before_pause": alerts, "paused_at_step": paused_at,
            "edit_applied_at_step": edit_step,
            "hedged_below_threshold_at_step": below_at if below_at > 0 else None,
            "seconds": round(time.monotonic() - t0, 1), "steps": per_step(db), "dry_run_screen": dry_run}


def main() -> int:
    parser = argparse.ArgumentParser(description="play the reward-hacking story in tmux")
    parser.add_argument("--workdir", type=Path, help="where the run file goes (default: a fresh temp dir)")
    parser.add_argument("--threshold", type=float, default=0.2, help="hedged share to fall below")
    parser.add_argument("--within", type=int, default=20, help="steps after the edit")
    args = parser.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="rlab-walk-"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        result = play(workdir, args.threshold, args.within)
    finally:
        db = workdir / "walk.db"
        run = query(db, "SELECT id FROM runs WHERE name = ?", [RUN])
        if run:
            send_command(db, run[0][0], "stop")
        subprocess.run(["tmux", "kill-session", "-t", SESSION], capture_output=True)
    print(json.dumps(result))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
