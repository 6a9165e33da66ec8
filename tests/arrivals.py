#!/usr/bin/env python3
"""Runs a subscriber (the command after FILE, e.g. `ezmsg sub /cam`) and writes the wall-clock
time of every message it prints to FILE, one a line: the test graph's record of what really
flowed, against which the tests check the rates the tools report (tests/lib.sh,
ez_check_rates). Stops the subscriber (by its pid) on SIGTERM / SIGINT.

  arrivals.py FILE COMMAND...
"""
import os
import signal
import subprocess
import sys
import time

out = open(sys.argv[1], "w", buffering=1)
child = subprocess.Popen(sys.argv[2:], stdout=subprocess.PIPE)


def stop(sig, frame):
    child.terminate()


signal.signal(signal.SIGTERM, stop)
signal.signal(signal.SIGINT, stop)
for line in child.stdout:
    out.write("%.6f\n" % time.time())
try:
    child.wait(10)
except subprocess.TimeoutExpired:
    child.kill()
    child.wait()
