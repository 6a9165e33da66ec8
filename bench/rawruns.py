"""bench/rawruns.py: reads the raw file the sweep scripts (bench/fan.sh, bench/rate.sh) write, one
run a line: KEY, ROUND, the load average before and after, and the run's JSON (ezmsg perf's
{"results": [...]} or a bench program's own object). Shared by their report scripts."""
import json


def load(path):
    """Returns (runs, fails, loads): runs maps KEY to the list of its good runs' records; fails
    lists (key, round, load, error) of the runs that failed or printed nothing; loads has the
    1-min load average after each run."""
    runs, fails, loads = {}, [], []
    for line in open(path):
        key, rnd, load_avg, text = line.rstrip("\n").split("\t", 3)
        loads.append(float(load_avg.split()[1]))
        try:
            rec = json.loads(text)
            rec = rec["results"][0] if "results" in rec else rec
        except (ValueError, KeyError, IndexError):
            rec = {"ok": False, "error": "no output (timeout or crash)"}
        if not rec.get("ok"):
            fails.append((key, rnd, load_avg, rec.get("error")))
            continue
        runs.setdefault(key, []).append(rec)
    return runs, fails, loads
