#!/usr/bin/env python3
"""tuneGen.py - make tune's workload file: checked, then turned into what a run needs.

  tuneGen.py check FILE [--bin BROKER]   every member checked (../shared/TUNING.md's
                                         schema); exit 2 with "FILE: member: what is wrong"
  tuneGen.py gen FILE OUTDIR             OUTDIR/workload.json  the file with every default filled in
                                         OUTDIR/fixture.json   the entities, as batches of 1000
                                         OUTDIR/subscriptions.json  the subscription bodies
                                         OUTDIR/mix.lua        the wrk script of load.mix

Checking happens before anything long starts (make tune's first step): a wrong
type, an unknown member, a share out of range, an unknown attribute type or
an unparsable duration is reported with the member's path, e.g.
  workload.json: entities.types[1].attributes[0].type: "Propety" is not one of Property, GeoProperty, ...
`store.database: mongoc` is refused while the broker has no MongoDB backend
(src/store/mongoc absent, or the broker binary refuses --database mongoc).

The generated entities: entity i (1-based, over all types, by share) of type T
has the id urn:ngsi-ld:T:i and every attribute of T; a numeric `value` v
varies per entity over 0..2v, anything else is copied. The subscriptions'
endpoint is the placeholder RECEIVER_URI (tuneRun.py puts the receiver's).
"""
import json
import os
import re
import subprocess
import sys

ATTR_TYPES = ("Property", "GeoProperty", "Relationship", "LanguageProperty", "VocabProperty",
              "ListProperty", "JsonProperty")
MIX_KINDS = ("patch", "query", "retrieve", "create")
RECEIVER = "RECEIVER_URI"
BATCH = 1000
NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:-]*$")


class WorkloadError(Exception):
    pass


def fail(path, msg):
    raise WorkloadError("%s: %s" % (path, msg))


def tname(v):
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, (int, float)):
        return "a number"
    if isinstance(v, str):
        return "a string"
    if isinstance(v, list):
        return "an array"
    if isinstance(v, dict):
        return "an object"
    return "null"


def want(path, v, kind):
    ok = {"object": isinstance(v, dict), "array": isinstance(v, list), "string": isinstance(v, str),
          "boolean": isinstance(v, bool),
          "number": isinstance(v, (int, float)) and not isinstance(v, bool),
          "integer": isinstance(v, int) and not isinstance(v, bool)}[kind]
    if not ok:
        fail(path, "expected %s, got %s (%s)" % ("an " + kind if kind[0] in "aeiou" else "a " + kind,
                                                 tname(v), json.dumps(v)[:60]))
    return v


def members(path, obj, allowed):
    want(path or "the workload", obj, "object")
    for k in obj:
        if k not in allowed:
            fail((path + "." if path else "") + k, "unknown member (known: %s)" % ", ".join(allowed))


def choice(path, v, choices):
    want(path, v, "string")
    if v not in choices:
        fail(path, "%s is not one of %s" % (json.dumps(v), ", ".join(choices)))
    return v


def int_range(path, v, lo, hi=None):
    want(path, v, "integer")
    if v < lo or (hi is not None and v > hi):
        fail(path, "%d is out of range (%d..%s)" % (v, lo, hi if hi is not None else "any"))
    return v


def share(path, v, lo_open=True):
    want(path, v, "number")
    if v < 0 or v > 1 or (lo_open and v == 0):
        fail(path, "%s is out of range (%s..1)" % (v, "above 0" if lo_open else "0"))
    return float(v)


def parse_duration(path, v):
    """Seconds of "30s", "2m", "1h", "500ms", "PT30S", "PT1M30S" or a number of seconds."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        if v <= 0:
            fail(path, "%s is not a positive duration" % v)
        return float(v)
    want(path, v, "string")
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*", v)
    if m:
        n = float(m.group(1)) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600, None: 1}[m.group(2)]
    else:
        m = re.fullmatch(r"PT(?:(\d+(?:\.\d+)?)H)?(?:(\d+(?:\.\d+)?)M)?(?:(\d+(?:\.\d+)?)S)?", v)
        if not m or not any(m.groups()):
            fail(path, "%s is not a duration (e.g. \"30s\", \"2m\", \"PT30S\")" % json.dumps(v))
        n = sum(float(g or 0) * k for g, k in zip(m.groups(), (3600, 60, 1)))
    if n <= 0:
        fail(path, "%s is not a positive duration" % json.dumps(v))
    return n


def check(w):
    """The workload with every default filled in; WorkloadError names the first bad member."""
    members("", w, ("store", "entities", "subscriptions", "load", "duration"))
    out = {}

    st = w.get("store", {})
    members("store", st, ("database", "persistent", "history"))
    out["store"] = {
        "database": choice("store.database", st.get("database", "corDB"), ("corDB", "mongoc")),
        "persistent": want("store.persistent", st.get("persistent", False), "boolean"),
        "history": choice("store.history", st.get("history", "none"), ("none", "corDB", "timescale")),
    }

    en = w.get("entities", {})
    members("entities", en, ("count", "types"))
    count = int_range("entities.count", en.get("count", 10000), 1, 10000000)
    types = want("entities.types", en.get("types", [{"type": "Vehicle",
                                                     "attributes": [{"name": "speed", "value": 42}]}]), "array")
    if not types:
        fail("entities.types", "empty: at least one type")
    ntypes, given = [], 0.0
    for i, t in enumerate(types):
        p = "entities.types[%d]" % i
        members(p, t, ("type", "share", "attributes"))
        if "type" not in t:
            fail(p + ".type", "missing")
        name = want(p + ".type", t["type"], "string")
        if not NAME_RE.match(name):
            fail(p + ".type", "%s is not a type name" % json.dumps(name))
        if any(x["type"] == name for x in ntypes):
            fail(p + ".type", "%s is given twice" % json.dumps(name))
        sh = share(p + ".share", t["share"]) if "share" in t else None
        if sh is not None:
            given += sh
        attrs = want(p + ".attributes", t.get("attributes", []), "array")
        nattrs = []
        for j, a in enumerate(attrs):
            q = "%s.attributes[%d]" % (p, j)
            members(q, a, ("name", "type", "value", "observedAt", "subAttributes"))
            if "name" not in a:
                fail(q + ".name", "missing")
            an = want(q + ".name", a["name"], "string")
            if not NAME_RE.match(an) or an in ("id", "type", "@context", "scope", "createdAt", "modifiedAt"):
                fail(q + ".name", "%s is not an attribute name" % json.dumps(an))
            if any(x["name"] == an for x in nattrs):
                fail(q + ".name", "%s is given twice" % json.dumps(an))
            na = {"name": an, "type": choice(q + ".type", a.get("type", "Property"), ATTR_TYPES),
                  "observedAt": want(q + ".observedAt", a.get("observedAt", False), "boolean"),
                  "subAttributes": int_range(q + ".subAttributes", a.get("subAttributes", 0), 0, 100)}
            if "value" in a:
                if a["value"] is None:
                    fail(q + ".value", "null is not a value")
                na["value"] = a["value"]
            nattrs.append(na)
        ntypes.append({"type": name, "share": sh, "attributes": nattrs})
    if given > 1.0 + 1e-9:
        fail("entities.types", "the shares add up to %.3g, more than 1" % given)
    rest = [t for t in ntypes if t["share"] is None]
    for t in rest:
        t["share"] = (1.0 - given) / len(rest) if given > 0 else 1.0 / len(rest)
    if rest and given > 0 and 1.0 - given < 1e-9:
        fail("entities.types", "the given shares add up to 1: nothing is left for %s" % rest[0]["type"])
    tot = sum(t["share"] for t in ntypes)
    left = count
    for k, t in enumerate(ntypes):
        n = left if k == len(ntypes) - 1 else int(round(count * t["share"] / tot))
        t["count"] = max(0, min(n, left))
        left -= t["count"]
    out["entities"] = {"count": count, "types": ntypes}
    bytype = {t["type"]: t for t in ntypes}

    subs = want("subscriptions", w.get("subscriptions", []), "array")
    nsubs = []
    for i, g in enumerate(subs):
        p = "subscriptions[%d]" % i
        members(p, g, ("count", "select", "type", "watchedAttributes", "q"))
        ng = {"count": int_range(p + ".count", g.get("count", 1), 1, 100000),
              "select": choice(p + ".select", g.get("select", "byType"), ("perEntity", "byType")),
              "type": want(p + ".type", g.get("type", ntypes[0]["type"]), "string")}
        if ng["type"] not in bytype:
            fail(p + ".type", "%s is not one of entities.types (%s)" % (json.dumps(ng["type"]),
                                                                     ", ".join(bytype)))
        if ng["select"] == "perEntity" and ng["count"] > bytype[ng["type"]]["count"]:
            fail(p + ".count", "%d perEntity subscriptions, but only %d %s entities" %
                 (ng["count"], bytype[ng["type"]]["count"], ng["type"]))
        if "watchedAttributes" in g:
            wa = want(p + ".watchedAttributes", g["watchedAttributes"], "array")
            names = [a["name"] for a in bytype[ng["type"]]["attributes"]]
            for j, x in enumerate(wa):
                want("%s.watchedAttributes[%d]" % (p, j), x, "string")
                if x not in names:
                    fail("%s.watchedAttributes[%d]" % (p, j), "%s is not an attribute of %s (%s)" %
                         (json.dumps(x), ng["type"], ", ".join(names)))
            ng["watchedAttributes"] = wa
        if "q" in g:
            ng["q"] = want(p + ".q", g["q"], "string")
        nsubs.append(ng)
    out["subscriptions"] = nsubs

    ld = w.get("load", {})
    members("load", ld, ("concurrency", "mix", "patch", "query"))
    mix = ld.get("mix", {"patch": 0.8, "query": 0.1, "retrieve": 0.05, "create": 0.05})
    members("load.mix", mix, MIX_KINDS)
    nmix = {k: share("load.mix." + k, mix[k], lo_open=False) for k in mix}
    if sum(nmix.values()) <= 0:
        fail("load.mix", "every share is 0: nothing to send")
    pa = ld.get("patch", {})
    members("load.patch", pa, ("attributes",))
    pattrs = want("load.patch.attributes", pa.get("attributes", []), "array")
    for j, x in enumerate(pattrs):
        want("load.patch.attributes[%d]" % j, x, "string")
    qu = ld.get("query", {})
    members("load.query", qu, ("type", "q", "limit"))
    nq = {"type": want("load.query.type", qu.get("type", ntypes[0]["type"]), "string"),
          "limit": int_range("load.query.limit", qu.get("limit", 20), 1, 1000)}
    if nq["type"] not in bytype:
        fail("load.query.type", "%s is not one of entities.types (%s)" % (json.dumps(nq["type"]), ", ".join(bytype)))
    if "q" in qu:
        nq["q"] = want("load.query.q", qu["q"], "string")
    if nmix.get("patch") and not pattrs:
        pattrs = []
    out["load"] = {"concurrency": int_range("load.concurrency", ld.get("concurrency", 50), 1, 10000),
                   "mix": nmix, "patch": {"attributes": pattrs}, "query": nq}
    out["duration"] = parse_duration("duration", w.get("duration", "30s"))
    if nmix.get("patch"):
        for t in ntypes:
            if not patch_attrs(out, t):
                fail("load.patch.attributes", "type %s has none of them and no Property to update" % t["type"])
    return out


def check_backend(w, binary):
    """store.database mongoc needs the MongoDB backend in the broker."""
    if w["store"]["database"] != "mongoc":
        return
    if binary and os.access(binary, os.X_OK):
        import socket
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        try:
            r = subprocess.run([binary, "-fg", "--port", str(port), "--bind", "127.0.0.1", "--database", "mongoc"], capture_output=True, text=True,
                               timeout=1)
            if "not built" in r.stderr:
                fail("store.database", "\"mongoc\": %s has no MongoDB backend" % binary)
        except subprocess.TimeoutExpired:
            pass


# ---- generation -----------------------------------------------------------------------

def vary(v, i):
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return v
    x = v * (i % 21) / 10.0
    return int(round(x)) if isinstance(v, int) else round(x, 3)


def attr_value(a, i):
    """The NGSI-LD attribute a of entity i."""
    t, v = a["type"], a.get("value")
    if t == "Property":
        body = {"type": t, "value": vary(v if v is not None else 1, i)}
    elif t == "GeoProperty":
        body = {"type": t, "value": v if isinstance(v, dict) else
                {"type": "Point", "coordinates": [round(-3.7 + (i % 1000) / 10000.0, 6),
                                                  round(40.4 + (i % 997) / 10000.0, 6)]}}
    elif t == "Relationship":
        body = {"type": t, "object": v if isinstance(v, str) else "urn:ngsi-ld:Target:%d" % (i % 50)}
    elif t == "LanguageProperty":
        body = {"type": t, "languageMap": v if isinstance(v, dict) else {"en": "name %d" % i, "es": "nombre %d" % i}}
    elif t == "VocabProperty":
        body = {"type": t, "vocab": v if v is not None else "Value%d" % (i % 10)}
    elif t == "ListProperty":
        body = {"type": t, "valueList": v if isinstance(v, list) else [i % 10, i % 7, i % 3]}
    else:
        body = {"type": t, "json": v if v is not None else {"n": i}}
    if a["observedAt"]:
        body["observedAt"] = "2024-01-01T00:00:%02d.%03dZ" % (i % 60, i % 1000)
    for k in range(a["subAttributes"]):
        body["sub%d" % (k + 1)] = {"type": "Property", "value": k + 1}
    return body


def entity(t, i):
    e = {"id": "urn:ngsi-ld:%s:%d" % (t["type"], i), "type": t["type"]}
    for a in t["attributes"]:
        e[a["name"]] = attr_value(a, i)
    return e


def ranges(w):
    """[(type, first index, last index)]: entity i of the whole fixture."""
    out, start = [], 1
    for t in w["entities"]["types"]:
        out.append((t, start, start + t["count"] - 1))
        start += t["count"]
    return out


def patch_attrs(w, t):
    """What a patch updates in an entity of type t: load.patch.attributes it has, else its first Property."""
    names = [a for a in t["attributes"] if a["name"] in w["load"]["patch"]["attributes"]]
    if names:
        return names
    props = [a for a in t["attributes"] if a["type"] == "Property"]
    return props[:1]


def subscription(w, g, k):
    s = {"type": "Subscription", "notification": {"endpoint": {"uri": RECEIVER, "accept": "application/json"}}}
    if g["select"] == "perEntity":
        first = [r for r in ranges(w) if r[0]["type"] == g["type"]][0][1]
        s["entities"] = [{"id": "urn:ngsi-ld:%s:%d" % (g["type"], first + k), "type": g["type"]}]
    else:
        s["entities"] = [{"type": g["type"]}]
    if "watchedAttributes" in g:
        s["watchedAttributes"] = g["watchedAttributes"]
    if "q" in g:
        s["q"] = g["q"]
    return s


def lua_str(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def mix_lua(w):
    """The wrk script: each request picks a kind by load.mix, an entity by share.

    On a small machine wrk shares the cores with the broker, so what wrk spends per
    request is taken from the broker's rate: the script formats every request once,
    in init (wrk.format, so the Host header is wrk's), and a request is then one
    random draw of kind and type, one of the entity (and of the PATCH body) and one
    string concatenation. The bytes on the wire are those of wrk.format."""
    from urllib.parse import quote
    mix = w["load"]["mix"]
    tot = sum(mix.values())
    q = w["load"]["query"]
    qs = "type=%s&limit=%d" % (quote(q["type"], safe=""), q["limit"])
    if "q" in q:
        qs += "&q=" + quote(q["q"], safe="")
    live = [(t, lo, hi) for t, lo, hi in ranges(w) if t["count"] > 0]
    n = w["entities"]["count"]
    # one cumulative table of (kind, type): query does not depend on the type
    picks, acc = [], 0.0
    for k in MIX_KINDS:
        if not mix.get(k):
            continue
        if k == "query":
            acc += mix[k] / tot
            picks.append((acc, k, 0))
            continue
        for i, (t, _, _) in enumerate(live):
            acc += mix[k] / tot * t["count"] / n
            picks.append((acc, k, i + 1))
    picks[-1] = (1.0,) + picks[-1][1:]
    lines = ["-- generated by test/perf/tune/tuneGen.py from the workload file: do not edit",
             "local picks = {%s}" % ", ".join("{%.9f, %s, %d}" % (c, lua_str(k), i) for c, k, i in picks),
             "local query_path = %s" % lua_str("/ngsi-ld/v1/entities?" + qs),
             "local types = {"]
    for t, lo, hi in live:
        bodies = []
        for b in range(32):
            body = {a["name"]: attr_value(a, b * 37 + 11) for a in patch_attrs(w, t)}
            bodies.append(lua_str(json.dumps(body, separators=(",", ":"))))
        new = entity(t, 0)
        del new["id"], new["type"]
        rest = json.dumps(new, separators=(",", ":"))[1:]
        lines.append("  {name = %s, lo = %d, hi = %d, create_tail = %s, patches = {%s}}," %
                     (lua_str(t["type"]), lo, hi, lua_str(("," + rest) if rest != "}" else "}"),
                      ", ".join(bodies)))
    lines.append("}")
    lines.append(r"""
local thread_id = 0
local json_h = {["Content-Type"] = "application/json"}
function setup(thread)
  thread:set("tid", thread_id)
  thread_id = thread_id + 1
end
-- what wrk.format writes for a request, cut at the "@" of its path, where the entity's number goes
local function around(method, path, body)
  local s = wrk.format(method, path, body and json_h or nil, body)
  local i = s:find("@", 1, true)
  return s:sub(1, i - 1), s:sub(i + 1)
end
local query_req, counter = nil, 0
function init(args)
  math.randomseed(os.time() * 1000 + tid)
  local prefix = "w" .. os.time() .. "-" .. tid .. "-" .. math.random(1, 1000000000) .. "-"
  query_req = wrk.format("GET", query_path)
  for _, t in ipairs(types) do
    local ent = "/ngsi-ld/v1/entities/urn:ngsi-ld:" .. t.name .. ":"
    t.get_head, t.get_tail = around("GET", ent .. "@")
    t.patch_tails = {}
    for k, b in ipairs(t.patches) do
      t.patch_head, t.patch_tails[k] = around("PATCH", ent .. "@/attrs", b)
    end
    -- a create's Content-Length grows with the digits of the counter: the head is cut before it
    local id0 = '{"id":"urn:ngsi-ld:' .. t.name .. ':' .. prefix
    local body0 = id0 .. '","type":"' .. t.name .. '"' .. t.create_tail
    local s = wrk.format("POST", "/ngsi-ld/v1/entities", json_h, body0)
    local i = s:find("Content-Length: ", 1, true) + #"Content-Length: "
    local j = s:find("\r\n", i, true)
    t.create_head, t.create_mid = s:sub(1, i - 1), s:sub(j, #s - #body0) .. id0
    t.create_len, t.create_rest = #body0, '","type":"' .. t.name .. '"' .. t.create_tail
  end
end
request = function()
  local r = math.random()
  local p = picks[#picks]
  for _, c in ipairs(picks) do
    if r <= c[1] then p = c; break end
  end
  local kind = p[2]
  if kind == "query" then
    return query_req
  end
  local t = types[p[3]]
  if kind == "create" then
    counter = counter + 1
    local c = tostring(counter)
    return t.create_head .. (t.create_len + #c) .. t.create_mid .. c .. t.create_rest
  end
  local id = math.random(t.lo, t.hi)
  if kind == "retrieve" then
    return t.get_head .. id .. t.get_tail
  end
  return t.patch_head .. id .. t.patch_tails[math.random(1, #t.patch_tails)]
end
""")
    return "\n".join(lines)


def gen(w, outdir):
    os.makedirs(outdir, exist_ok=True)
    with open(os.path.join(outdir, "workload.json"), "w") as f:
        json.dump(w, f, indent=1)
    with open(os.path.join(outdir, "fixture.json"), "w") as f:
        f.write("[\n")
        first = True
        for t, lo, hi in ranges(w):
            for start in range(lo, hi + 1, BATCH):
                batch = [entity(t, i) for i in range(start, min(hi, start + BATCH - 1) + 1)]
                f.write(("" if first else ",\n") + json.dumps(batch, separators=(",", ":")))
                first = False
        f.write("\n]\n")
    subs = [subscription(w, g, k) for g in w["subscriptions"] for k in range(g["count"])]
    with open(os.path.join(outdir, "subscriptions.json"), "w") as f:
        json.dump(subs, f, separators=(",", ":"))
    with open(os.path.join(outdir, "mix.lua"), "w") as f:
        f.write(mix_lua(w))


def load_file(path):
    try:
        with open(path) as f:
            text = f.read()
    except OSError as e:
        raise WorkloadError("cannot read it: %s" % e.strerror)
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise WorkloadError("not JSON: %s (line %d, column %d)" % (e.msg, e.lineno, e.colno))


def main(argv):
    if len(argv) < 3 or argv[1] not in ("check", "gen"):
        print(__doc__, file=sys.stderr)
        return 2
    path = argv[2]
    try:
        w = check(load_file(path))
        if argv[1] == "check":
            check_backend(w, argv[argv.index("--bin") + 1] if "--bin" in argv else None)
            print("tune: %s: %d entities (%s), %d subscriptions, mix %s, %s s per run" %
                  (path, w["entities"]["count"], ", ".join("%s %d" % (t["type"], t["count"])
                                                          for t in w["entities"]["types"]),
                   sum(g["count"] for g in w["subscriptions"]),
                   " ".join("%s %.2f" % kv for kv in w["load"]["mix"].items()), "%g" % w["duration"]))
        else:
            if len(argv) < 4:
                print("tuneGen.py gen FILE OUTDIR", file=sys.stderr)
                return 2
            gen(w, argv[3])
    except WorkloadError as e:
        print("tune: %s: %s" % (path, e), file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
