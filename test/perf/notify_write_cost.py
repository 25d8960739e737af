#!/usr/bin/env python3
"""notify_write_cost.py - what matching costs the writer: PATCH req/s (wrk -t2 -c16, 4 s, 1000
Vehicles) with no subscription, with one whose q never matches (every write is matched, none is
due), and with one whose every notification is dropped at once (--notifierQueueSize 1 and a
receiver that never answers: match + job + drop, no delivery). Two rounds, alternated.

  python3 test/perf/notify_write_cost.py
"""
import sys, os, subprocess, time, json, urllib.request
HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
import perf_run
B=os.path.join(REPO, "build", "release", "coraine")
R=os.path.join(REPO, "build", "release", "tools", "receiver")
def sub(base, uri, extra={}):
    body={"type":"Subscription","entities":[{"type":"Vehicle"}],"notification":{"endpoint":{"uri":uri}}}
    body.update(extra)
    req=urllib.request.Request(base+"/ngsi-ld/v1/subscriptions",data=json.dumps(body).encode(),method="POST",headers={"Content-Type":"application/json"})
    urllib.request.urlopen(req).read()
for rnd in range(2):
  for label, flags, mode in (("none",[],None),("sub q never true",[],"q"),("sub, every job dropped (queue 1, dead receiver)",["--notifierQueueSize","1"],"dead")):
    port=perf_run.free_port(); rport=perf_run.free_port()
    p=perf_run.start_broker(port, flags, binary=B)
    r=subprocess.Popen([R,"--port",str(rport)]+(["--never"] if mode=="dead" else []),stdout=subprocess.DEVNULL,stderr=subprocess.DEVNULL)
    base="http://127.0.0.1:%d"%port
    perf_run.wait_up(base+"/version"); time.sleep(0.2)
    perf_run.load(base,1000)
    if mode=="q": sub(base,"http://127.0.0.1:%d/n"%rport,{"q":"speed>1000"})
    if mode=="dead": sub(base,"http://127.0.0.1:%d/n"%rport)
    rps,bad,p99=perf_run.wrk(base+"/",4,16,2,os.path.join(HERE, "patch.lua"),["1000"])
    print("%-50s req/s %.0f p99 %s" % (label,rps,p99))
    p.terminate(); p.wait(timeout=10) if mode!="dead" else None
    r.kill(); r.wait()
    if mode=="dead":
        try: p.wait(timeout=10)
        except Exception: p.kill(); p.wait()
