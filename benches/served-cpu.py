#!/usr/bin/env python3
"""Runs a server mcpload serves through and writes its CPU seconds (user + system, its whole
life) to FILE, read from /proc once it has exited but before it is reaped, or when mcpload
stops it with SIGTERM (the calls are over by then). Nothing runs beside the calls while they
run: the wrapper only waits.

    served-cpu.py FILE COMMAND [ARGS...]
"""
import os
import signal
import subprocess
import sys

child = subprocess.Popen(sys.argv[2:])


def put():
    f = open(f"/proc/{child.pid}/stat").read().rsplit(")", 1)[1].split()
    seconds = (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
    open(sys.argv[1] + ".tmp", "w").write(f"{seconds}\n")
    os.rename(sys.argv[1] + ".tmp", sys.argv[1])


def term(*_):
    put()
    child.send_signal(signal.SIGTERM)


signal.signal(signal.SIGTERM, term)
os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)
put()
child.wait()
