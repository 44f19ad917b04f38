#!/bin/bash
# usage: tests/bench/first_screen.sh REPO_DIR OUT_DIR SECONDS  (needs tmux, bc)
# Runs bare `rlab` in tmux from a fresh folder with an empty cache, as a new user would; prints
# when RUNNING first shows on screen, then after SECONDS the run's held-out eval curve from its db.
repo=$1; out=$2; secs=${3:-150}
rm -rf "$out"; mkdir -p "$out/cache"; cd "$out"
tmux kill-session -t fs 2>/dev/null
t0=$(date +%s.%N)
tmux new -d -s fs -x 150 -y 45 "$EXTRA_ENV RLAB_CACHE_DIR=$out/cache XDG_CACHE_HOME=$out/cache $repo/.venv/bin/rlab; sleep 600"
while :; do
  now=$(date +%s.%N); el=$(echo "$now - $t0" | bc)
  if tmux capture-pane -p -t fs | grep -q "RUNNING"; then echo "RUNNING after $el s"; tmux capture-pane -p -t fs | head -3; break; fi
  if (( $(echo "$el > 60" | bc) )); then echo "no RUNNING after 60 s"; tmux capture-pane -p -t fs | head -5; break; fi
  sleep 0.2
done
sleep "$secs"
tmux capture-pane -p -t fs | head -3
tmux send-keys -t fs q; sleep 1; tmux send-keys -t fs s 2>/dev/null
sleep 3; tmux kill-session -t fs 2>/dev/null; for p in $(pgrep -f "rlab.engine"); do [ "$(readlink /proc/$p/cwd)" = "$out" ] && kill $p; done
$repo/.venv/bin/python - "$out/rlab.db" <<'PY'
import sqlite3, sys, json
c = sqlite3.connect(sys.argv[1])
rows = c.execute("select step, eval_pass_at_1, metrics from steps where eval_pass_at_1 is not null order by step").fetchall()
curve = []
for step, p, m in rows:
    m = json.loads(m or "{}")
    curve.append([step, round(m.get("elapsed_seconds", 0.0), 1), round(p, 3)])
print("eval curve [step, elapsed_s incl. evals, pass@1]:", curve)
PY
