"""MQTT notifications (7.2) through a real mosquitto started on a free
loopback port, received by tools/receiver in its MQTT subscriber mode."""

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time

import pytest

from ngsi import assert_problem, entity, free_port, prop, uid
from receiver import Receiver, wait_failed

MOSQUITTO = shutil.which("mosquitto") or "/usr/sbin/mosquitto"


def start_mosquitto(conf, *ports):
    """mosquitto -c conf, once each of its listener ports accepts a connection
    (a fixed sleep was too short on a loaded machine: the receiver found no
    broker to subscribe at)."""
    log = tempfile.TemporaryFile()       # its log (a pipe nobody reads could fill and stop it)
    p = subprocess.Popen([MOSQUITTO, "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=log)
    deadline = time.time() + 10
    for port in ports:
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if p.poll() is not None:
                    log.seek(0)
                    raise RuntimeError("mosquitto exited %s: %s" % (p.returncode, log.read().decode()[-2000:]))
                if time.time() > deadline:
                    p.kill()
                    raise RuntimeError("mosquitto does not accept on port %d after 10 s" % port)
                time.sleep(0.02)
    return p


@pytest.fixture(scope="module")
def mosquitto(tmp_path_factory):
    if not os.path.exists(MOSQUITTO):
        pytest.skip("mosquitto is not installed (scripts/deps.sh installs it)")
    port = free_port()
    conf = tmp_path_factory.mktemp("mqtt") / "mosquitto.conf"
    conf.write_text("listener %d 127.0.0.1\nallow_anonymous true\n" % port)
    p = start_mosquitto(conf, port)
    yield port
    p.terminate()
    p.wait(5)


@pytest.fixture
def mrcv(mosquitto):
    r = Receiver("--mqtt", "127.0.0.1:%d" % mosquitto, "--topic", "ngsi/#")
    time.sleep(0.2)           # its SUBSCRIBE reaches mosquitto
    yield r
    r.stop()


def mqtt_sub(cli, uri, notifier_info=None, **notification):
    ep = {"uri": uri}
    if notifier_info:
        ep["notifierInfo"] = [{"key": k, "value": v} for k, v in notifier_info.items()]
    n = {"endpoint": notification.pop("endpoint", ep), "sysAttrs": True}
    n.update(notification)
    r = cli.post("/subscriptions", {"type": "Subscription", "entities": [{"type": "Car"}], "notification": n})
    assert r.status_code == 201, r.text
    return r.headers["Location"].rsplit("/", 1)[1]


@pytest.mark.parametrize("qos", ["0", "1", "2"])
@pytest.mark.parametrize("version", ["mqtt3.1.1", "mqtt5.0"])
def test_7_2_qos_and_versions(cli, mosquitto, mrcv, qos, version):
    sid = mqtt_sub(cli, "mqtt://127.0.0.1:%d/ngsi/%s" % (mosquitto, uid("t")),
                   {"MQTT-QoS": qos, "MQTT-Version": version})
    eid = uid()
    cli.create(entity(eid, "Car", speed=prop(1)))
    for i in range(5):
        cli.patch("/entities/%s/attrs" % eid, {"speed": prop(i + 2)})
    c = mrcv.wait(6, timeout=10)
    assert c["notifications"] == 6 and c["outOfOrder"] == 0 and c["duplicates"] == 0
    n = mrcv.notifications()[0]
    assert n["headers"]["Content-Type"] == "application/json"
    assert "json-ld#context" in n["headers"]["Link"]
    assert n["headers"]["NGSILD-Tenant"] == cli.tenant
    assert n["body"]["subscriptionId"] == sid and n["body"]["data"][0]["id"] == eid
    # the receiver can have the 6th message before the notifier's thread has
    # counted it sent (libmosquitto's publish callback runs after the write):
    # timesSent gets there within a moment, never past 6
    deadline = time.time() + 5
    while True:
        sent = cli.get("/subscriptions/" + sid).json()["notification"]["timesSent"]
        if sent == 6 or time.time() > deadline:
            break
        time.sleep(0.02)
    assert sent == 6


def test_7_2_ld_json_and_receiver_info_in_metadata(cli, mosquitto, mrcv):
    mqtt_sub(cli, "mqtt://127.0.0.1:%d/ngsi/ld" % mosquitto,
             endpoint={"uri": "mqtt://127.0.0.1:%d/ngsi/ld" % mosquitto, "accept": "application/ld+json",
                       "receiverInfo": [{"key": "X-Who", "value": "me"}]})
    cli.create(entity(uid(), "Car", speed=prop(1)))
    mrcv.wait(1)
    n = mrcv.notifications()[0]
    assert n["headers"]["Content-Type"] == "application/ld+json"
    assert n["headers"]["X-Who"] == "me"
    assert "Link" not in n["headers"]
    assert "@context" in n["body"]["data"][0]


def test_7_2_unreachable_broker_is_counted_failed(cli):
    sid = mqtt_sub(cli, "mqtt://127.0.0.1:%d/ngsi/x" % free_port())
    cli.create(entity(uid(), "Car", speed=prop(1)))
    n = wait_failed(cli, sid)
    assert n["timesFailed"] == 1 and n["status"] == "failed"


@pytest.mark.parametrize("uri,info", [
    ("mqtt://127.0.0.1:1883", None),                      # no topic
    ("mqtt://127.0.0.1:99999/t", None),                   # bad port
    ("mqtt://127.0.0.1/t", {"MQTT-QoS": "3"}),
    ("mqtt://127.0.0.1/t", {"MQTT-Version": "mqtt4"}),
])
def test_7_2_invalid_mqtt_endpoints(cli, uri, info):
    ep = {"uri": uri}
    if info:
        ep["notifierInfo"] = [{"key": k, "value": v} for k, v in info.items()]
    r = cli.post("/subscriptions", {"type": "Subscription", "entities": [{"type": "Car"}],
                                    "notification": {"endpoint": ep}})
    assert_problem(r, 400, "BadRequestData")


# ------------------------------------------------------------- mqtts://

def _openssl(*args, cwd):
    subprocess.run(["openssl"] + list(args), cwd=cwd, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def tls_mosquitto(tmp_path_factory):
    """A mosquitto with a plain listener (for the receiver) and a TLS one
    that asks for a user and password, its certificate signed by a CA the
    test makes with openssl."""
    if not os.path.exists(MOSQUITTO) or not shutil.which("openssl") or not shutil.which("mosquitto_passwd"):
        pytest.skip("mosquitto, mosquitto_passwd and openssl are needed (scripts/deps.sh)")
    d = tmp_path_factory.mktemp("mqtts")
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
             "-subj", "/CN=coraine test CA", cwd=d)
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "srv.key", "-out", "srv.csr",
             "-subj", "/CN=127.0.0.1", cwd=d)
    (d / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1\n")
    _openssl("x509", "-req", "-in", "srv.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
             "-out", "srv.pem", "-days", "2", "-extfile", "ext.cnf", cwd=d)
    (d / "passwd").write_text("")
    subprocess.run(["mosquitto_passwd", "-b", str(d / "passwd"), "bob", "s3cret"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    plain, tls = free_port(), free_port()
    conf = d / "mosquitto.conf"
    # started as root, mosquitto would become "mosquitto", who cannot read the test's key
    conf.write_text("user %s\nper_listener_settings true\n" % pwd.getpwuid(os.geteuid()).pw_name +
                    "listener %d 127.0.0.1\nallow_anonymous true\n"
                    "listener %d 127.0.0.1\nallow_anonymous false\npassword_file %s\n"
                    "cafile %s\ncertfile %s\nkeyfile %s\n"
                    % (plain, tls, d / "passwd", d / "ca.pem", d / "srv.pem", d / "srv.key"))
    p = start_mosquitto(conf, plain, tls)
    yield {"plain": plain, "tls": tls, "ca": str(d / "ca.pem")}
    p.terminate()
    p.wait(5)


def test_7_2_mqtts_with_user_and_password(tls_mosquitto, broker_factory, make_client):
    cli = make_client(broker_factory("--notifierCaFile", tls_mosquitto["ca"]))
    r = Receiver("--mqtt", "127.0.0.1:%d" % tls_mosquitto["plain"], "--topic", "ngsi/#")
    try:
        time.sleep(0.2)
        topic = "ngsi/" + uid("tls")
        sid = mqtt_sub(cli, "mqtts://bob:s3cret@127.0.0.1:%d/%s" % (tls_mosquitto["tls"], topic),
                       {"MQTT-QoS": "2", "MQTT-Version": "mqtt5.0"})
        eid = uid()
        cli.create(entity(eid, "Car", speed=prop(1)))
        cli.patch("/entities/%s/attrs" % eid, {"speed": prop(2)})
        c = r.wait(2, timeout=10)
        assert c["notifications"] == 2 and c["outOfOrder"] == 0, c
        assert r.notifications()[0]["body"]["subscriptionId"] == sid
        # a wrong password is refused by mosquitto: counted failed, nothing received
        bad = mqtt_sub(cli, "mqtts://bob:wrong@127.0.0.1:%d/%s" % (tls_mosquitto["tls"], topic))
        cli.create(entity(uid(), "Car", speed=prop(1)))
        assert wait_failed(cli, bad)["status"] == "failed"
    finally:
        r.stop()


def test_7_2_mqtts_untrusted_certificate_fails(tls_mosquitto, cli):
    """Without the test's CA (the system's CAs only) the TLS handshake fails."""
    sid = mqtt_sub(cli, "mqtts://bob:s3cret@127.0.0.1:%d/ngsi/x" % tls_mosquitto["tls"])
    cli.create(entity(uid(), "Car", speed=prop(1)))
    n = wait_failed(cli, sid)
    assert n["timesFailed"] >= 1 and n["status"] == "failed" and n["timesSent"] == 0


def test_7_2_dead_mqtt_brokers_hold_no_thread(broker_factory, make_client):
    """MQTT brokers that accept and never answer (no CONNACK) hold only their
    own lanes: with two sender threads, an HTTP receiver beside them gets
    every notification at once; theirs fail at the timeout, counted."""
    import socket
    import threading
    cli = make_client(broker_factory("--notifierThreads", "2", "--notifierTimeout", "3000"))
    socks, held = [], []

    def hold(s):
        while True:
            try:
                held.append(s.accept()[0])
            except OSError:
                return
    for _ in range(3):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        socks.append(s)
        threading.Thread(target=hold, args=(s,), daemon=True).start()
    r = Receiver()
    try:
        dead = [mqtt_sub(cli, "mqtt://127.0.0.1:%d/t" % s.getsockname()[1]) for s in socks]
        r_sid = cli.post("/subscriptions", {"type": "Subscription", "entities": [{"type": "Car"}],
                                            "notification": {"endpoint": {"uri": r.uri}, "sysAttrs": True}})
        assert r_sid.status_code == 201
        ids = [uid() for _ in range(8)]
        t0 = time.time()
        for eid in ids:
            cli.create(entity(eid, "Car", speed=prop(1)))
        c = r.wait(8, timeout=10, key="entities")
        assert c["entities"] == 8 and time.time() - t0 < 2.5, (c, time.time() - t0)
        n = wait_failed(cli, dead[0], timeout=15)
        assert n["status"] == "failed" and n["timesSent"] == 0
    finally:
        r.stop()
        for s in socks:
            s.close()
        for c in held:
            c.close()


def test_7_2_reconnects_after_the_mqtt_broker_restarts(cli, tmp_path):
    """libmosquitto's client reconnects (1 s doubling up to 30 s): after the
    MQTT broker comes back on its port, notifications are delivered again."""
    if not os.path.exists(MOSQUITTO):
        pytest.skip("mosquitto is not installed (scripts/deps.sh installs it)")
    port = free_port()
    conf = tmp_path / "mosquitto.conf"
    conf.write_text("listener %d 127.0.0.1\nallow_anonymous true\n" % port)

    def start():
        p = start_mosquitto(conf, port)
        r = Receiver("--mqtt", "127.0.0.1:%d" % port, "--topic", "ngsi/#")
        time.sleep(0.2)
        return p, r

    p, r = start()
    try:
        sid = mqtt_sub(cli, "mqtt://127.0.0.1:%d/ngsi/re" % port, {"MQTT-QoS": "1"})
        eid = uid()
        cli.create(entity(eid, "Car", speed=prop(0)))
        assert r.wait(1)["notifications"] == 1
        r.stop()
        p.terminate()
        p.wait(5)
        cli.patch("/entities/%s/attrs" % eid, {"speed": prop(1)})        # while it is down: fails, counted
        assert wait_failed(cli, sid)["timesFailed"] >= 1
        p, r = start()
        deadline, i = time.time() + 20, 2
        while r.count()["notifications"] == 0 and time.time() < deadline:
            cli.patch("/entities/%s/attrs" % eid, {"speed": prop(i)})
            i += 1
            time.sleep(0.5)
        assert r.count()["notifications"] >= 1
        deadline = time.time() + 5
        while cli.get("/subscriptions/" + sid).json()["notification"]["timesSent"] < 2 and time.time() < deadline:
            time.sleep(0.05)
        assert cli.get("/subscriptions/" + sid).json()["notification"]["timesSent"] >= 2
    finally:
        r.stop()
        p.terminate()
        p.wait(5)
