#!/usr/bin/env python3
"""What the /debug/pprof endpoint costs the process it runs in.

1. Scrape cost: scripts/many_stacks.c (16,384 distinct stacks, every
   allocation recorded) under the shim with ALLOCMUX_HTTP; the serving
   thread's CPU time per scrape of /debug/pprof/heap, from
   /proc/PID/task/TID/schedstat (ns on CPU), and the request's wall time.
2. Cost while scraped: scripts/churn.c with sampled stacks, in
   interleaved rounds with the endpoint off and on, scraped every
   --every seconds (far more often than a fleet profiler's 10-15 s) while
   it runs; the median ratio of wall times.

Usage: python3 scripts/endpoint_cost.py [--rounds 7] [--every 1] [--out FILE.md]
"""
import argparse, os, re, statistics, subprocess, sys, tempfile, threading, time, urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

def build(tmp, name, flags=()):
    exe = os.path.join(tmp, name)
    subprocess.run(["cc", "-O2", "-g", "-pthread", *flags, "-o", exe, os.path.join(ROOT, "scripts", name + ".c")], check=True)
    return exe

def shim():
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "allocmux-shim"], cwd=ROOT, check=True)
    return os.path.join(ROOT, "target", "release", "liballocmux_shim.so")

def start(exe, so, env, args=()):
    e = dict(os.environ, LD_PRELOAD=so, ALLOCMUX_HTTP="127.0.0.1:0", **env)
    p = subprocess.Popen([exe, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=e, text=True)
    url = re.search(r"http://\S+", p.stderr.readline()).group(0)
    return p, url

def flusher_cpu_ns(pid):
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/comm") as f:
            if f.read().strip() == "allocmux-flush":
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    return int(f.read().split()[0])
    raise SystemExit("no allocmux-flush thread")

def scrape(url):
    with urllib.request.urlopen(url + "/debug/pprof/heap", timeout=60) as r:
        return len(r.read())

def scrape_cost(so, tmp, n=20):
    exe = build(tmp, "many_stacks")
    p, url = start(exe, so, {"ALLOCMUX_STACKS": "exact"})
    assert p.stdout.readline().strip() == "ready"
    scrape(url)  # the first one grows the buffers
    cpu0, walls, size = flusher_cpu_ns(p.pid), [], 0
    for _ in range(n):
        t = time.perf_counter()
        size = scrape(url)
        walls.append(time.perf_counter() - t)
    cpu = (flusher_cpu_ns(p.pid) - cpu0) / n
    p.stdin.close(); p.wait()
    return cpu / 1e6, statistics.median(walls) * 1e3, size

def churn_cost(so, tmp, rounds, every, iterations):
    exe = build(tmp, "churn")
    ratios = []
    for _ in range(rounds):
        times = {}
        for on in (False, True):
            env = dict(os.environ, LD_PRELOAD=so, ALLOCMUX_STACKS="sample")
            env.pop("ALLOCMUX_HTTP", None)
            if on:
                env["ALLOCMUX_HTTP"] = "127.0.0.1:0"
            t = time.perf_counter()
            p = subprocess.Popen([exe, "2", str(iterations)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            if on:
                url = re.search(r"http://\S+", p.stderr.readline()).group(0)
                def scraper():
                    while p.poll() is None:
                        try:
                            scrape(url)
                        except Exception:
                            return
                        time.sleep(every)
                threading.Thread(target=scraper, daemon=True).start()
            p.wait()
            times[on] = time.perf_counter() - t
        ratios.append(times[True] / times[False])
    return statistics.median(ratios), min(ratios), max(ratios)

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--every", type=float, default=1.0)
    ap.add_argument("--iterations", type=int, default=2_000_000)
    ap.add_argument("--out")
    a = ap.parse_args()
    so = shim()
    with tempfile.TemporaryDirectory() as tmp:
        cpu_ms, wall_ms, size = scrape_cost(so, tmp)
        med, lo, hi = churn_cost(so, tmp, a.rounds, a.every, a.iterations)
    load = os.getloadavg()[0]
    text = f"""Machine: {os.cpu_count()} cores; load average at start {load:.2f}

| measure | figure |
|---|---|
| scrape of /debug/pprof/heap, 16,384 distinct stacks (exact), serving thread's CPU time | {cpu_ms:.1f} ms (profile {size / 1e6:.2f} MB) |
| the same, request wall time (median of 20, client on the same host) | {wall_ms:.1f} ms |
| churn (2 threads x {a.iterations:,} pairs, sampled stacks), endpoint on and scraped every {a.every:g} s / off, {a.rounds} interleaved rounds | {med:.3f} (min {lo:.3f}, max {hi:.3f}) |
"""
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)

if __name__ == "__main__":
    main()
