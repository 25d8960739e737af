"""The render cache serves ld+json answers too (issue 11, doc/architecture.md
"The render cache"): the @context member is put in before the cached text's
closing brace, and the answer is the same as a fresh rendering."""

import pytest

from ngsi import entity, prop, rel, uid


def stats(cli):
    return cli.get("/statistics").json()["renderCache"]


@pytest.mark.cordb      # a version kept in RAM between requests (mongoc decodes each read)
def test_5_7_2_ld_json_answers_come_from_the_render_cache(cli):
    ids = [uid("R") for _ in range(3)]
    for i, eid in enumerate(ids):
        cli.create(entity(eid, "RcT", n=prop(i), r=rel("urn:ngsi-ld:X:1")))
    plain = cli.get("/entities", params={"type": "RcT"}).json()      # fills the cache
    before = stats(cli)
    got = cli.get("/entities", params={"type": "RcT"}, accept="application/ld+json")
    assert got.status_code == 200, got.text
    after = stats(cli)
    assert after["hits"] - before["hits"] >= 3
    body = got.json()
    for a, b in zip(plain, body):
        ctx = b.pop("@context")
        assert ctx and list(b) == list(a) and b == a
    one = cli.get("/entities/" + ids[0], accept="application/ld+json").json()
    assert list(one)[-1] == "@context" and one["n"] == prop(0)
