"""Issue 10 (store): bounded regex work (4.9 ~=, 6.4.3.2 idPattern), --maxTenants
(4.14), emptied tenants, and the order of modifiedAt."""

import threading
from datetime import datetime

from ngsi import assert_problem, entity, prop, uid

# (a+)+$ against a long run of a's followed by something else backtracks
# exponentially: PCRE2 stops at its match limit.
EVIL = "(a+)+$"
AAA = "a" * 40 + "!"


def test_6_4_3_2_idpattern_over_the_match_limit_is_400(cli):
    cli.create(entity("urn:ngsi-ld:Evil:" + AAA, "Evil"))
    r = cli.get("/entities", params={"type": "Evil", "idPattern": "^urn:ngsi-ld:Evil:" + EVIL})
    pd = assert_problem(r, 400, "BadRequestData")
    assert "idPattern" in pd["detail"] and "match limit" in pd["detail"]


def test_4_9_q_regex_over_the_match_limit_is_400(cli):
    cli.create(entity(uid(), "Evil", name=prop(AAA)))
    for params in ({"type": "Evil", "q": "name~=" + EVIL},
                   {"type": "Evil", "q": "name~=" + EVIL, "count": "true", "limit": "0"}):
        pd = assert_problem(cli.get("/entities", params=params), 400, "BadRequestData")
        assert pd["detail"].startswith("q:") and "match limit" in pd["detail"]
    # a harmless regex on the same data still answers
    r = cli.get("/entities", params={"type": "Evil", "q": "name~=^a+!$"})
    assert r.status_code == 200 and len(r.json()) == 1


def test_4_14_max_tenants(broker_factory, make_client):
    b = broker_factory("--maxTenants", "3")        # the default tenant and two more
    a, c = make_client(b), make_client(b)
    a.create(entity(uid(), "T"))
    c.create(entity(uid(), "T"))
    d = make_client(b)
    pd = assert_problem(d.post("/entities", entity(uid(), "T")), 422, "OperationNotSupported")
    assert "--maxTenants" in pd["detail"]
    assert_problem(d.get("/entities", params={"type": "T"}), 404, "NonexistentTenant")
    a.create(entity(uid(), "T"))                     # existing tenants go on
    make_client(b, None).create(entity(uid(), "T"))  # and so does the default one


def test_4_14_emptied_tenant_still_answers(cli):
    ids = [uid() for _ in range(50)]
    for i in ids:
        cli.create(entity(i, "Gone"))
    for i in ids:
        assert cli.delete("/entities/" + i).status_code == 204
    r = cli.get("/entities", params={"type": "Gone"})
    assert r.status_code == 200 and r.json() == []          # not NonexistentTenant
    cli.create(entity(ids[0], "Gone"))
    assert cli.entity(ids[0])["id"] == ids[0]


def _instant(ts):
    """A rendered DateTime as a point in time: the broker writes milliseconds when the
    microseconds are a whole number of them (.521Z, then .521914Z), so the strings alone
    do not sort as the instants do."""
    return datetime.fromisoformat(ts.replace("Z", "+00:00"))


def test_5_6_17_modified_at_never_goes_backwards(cli):
    eid = uid()
    cli.create(entity(eid, "Mono", n=prop(0)))
    errors = []

    def writer(k):
        for i in range(30):
            r = cli.patch("/entities/" + eid, {"w%d" % k: prop(i)})
            if r.status_code != 204:
                errors.append(r.status_code)

    ts = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
    for t in ts:
        t.start()
    seen = []
    for _ in range(40):
        e = cli.entity(eid, params={"options": "sysAttrs"})
        seen.append(e["modifiedAt"])
    for t in ts:
        t.join()
    assert not errors
    instants = [_instant(ts) for ts in seen]
    assert instants == sorted(instants), seen
    e = cli.entity(eid, params={"options": "sysAttrs"})
    assert _instant(e["createdAt"]) <= _instant(e["modifiedAt"])
    assert all(e["w%d" % k]["value"] == 29 for k in range(4))
