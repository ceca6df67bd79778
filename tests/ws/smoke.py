#!/usr/bin/env python3
"""The Codebuff WebSocket protocol at /v1/ws from Python's `websockets` client, as a
Codebuff-protocol tool would speak it (docs/ws.md).

Usage: smoke.py URL TOKEN, where URL is the daemon's base (http://127.0.0.1:PORT) and TOKEN
its token. The daemon runs with `--ws-default-agent mock`. Checks, on content: identify and
ping acks; a `stream` prompt whose chunks make the answer, then its prompt-response with the
session, messages and cost; a failed ack for an unknown type on a connection that goes on;
the browser's subprotocol form of the token; a refused upgrade without the token. Prints
`N passed, 0 failed` and exits 0, or raises.
"""

import json
import sys
import uuid

from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

TIMEOUT = 60


def recv(ws):
    return json.loads(ws.recv(timeout=TIMEOUT))


def expect_ack(ws, txid):
    msg = recv(ws)
    # No nulls: `error` only on a failed ack (the real client's schemas want absent or a value).
    assert msg == {"type": "ack", "txid": txid, "success": True}, msg


def main():
    base, token = sys.argv[1], sys.argv[2]
    url = base.replace("http://", "ws://", 1) + "/v1/ws"
    session = "py-" + uuid.uuid4().hex[:8]
    passed = 0

    with connect(url, additional_headers={"Authorization": f"Bearer {token}"}) as ws:
        ws.send(json.dumps({"type": "identify", "txid": 1, "clientSessionId": session}))
        expect_ack(ws, 1)
        ws.send(json.dumps({"type": "ping", "txid": 2}))
        expect_ack(ws, 2)
        passed += 1

        ws.send(json.dumps({
            "type": "action", "txid": 3,
            "data": {
                "type": "prompt", "promptId": "py-1", "prompt": "stream hello from python",
                "fingerprintId": "smoke", "costMode": "normal", "sessionState": {},
                "toolResults": [], "agentId": "mock",
            },
        }))
        expect_ack(ws, 3)
        chunks = []
        while True:
            msg = recv(ws)
            assert msg["type"] == "action", msg
            data = msg["data"]
            if data["type"] == "response-chunk":
                assert data["userInputId"] == "py-1", data
                chunks.append(data["chunk"])
                continue
            assert data["type"] == "prompt-response", data
            break
        assert "".join(chunks) == "hello from python", chunks
        assert len(chunks) == 3, chunks
        assert data["promptId"] == "py-1"
        assert data["output"]["value"] == "hello from python", data
        assert data["output"]["status"] == "completed", data
        assert data["output"]["cost"]["credits"] > 0, data
        state = data["sessionState"]
        assert state["sessionId"] == session, state
        assert state["messages"] == [
            {"role": "user", "content": "stream hello from python"},
            {"role": "assistant", "content": "hello from python"},
        ], state
        assert state["cost"]["credits"] == data["output"]["cost"]["credits"], state
        passed += 1

        ws.send(json.dumps({"type": "hello", "txid": 4}))
        msg = recv(ws)
        assert msg["txid"] == 4 and msg["success"] is False, msg
        assert msg["error"].startswith("unknown message type `hello`"), msg
        ws.send(json.dumps({"type": "ping", "txid": 5}))
        expect_ack(ws, 5)
        passed += 1

    # Browsers cannot set Authorization: the token as a subprotocol, answered with `codebuff`.
    with connect(url, subprotocols=["codebuff", f"bearer.{token}"]) as ws:
        assert ws.subprotocol == "codebuff", ws.subprotocol
        ws.send(json.dumps({"type": "ping", "txid": 1}))
        expect_ack(ws, 1)
        passed += 1

    try:
        with connect(url):
            raise AssertionError("an upgrade without the token was accepted")
    except InvalidStatus as refused:
        assert refused.response.status_code == 401, refused.response.status_code
    passed += 1

    print(f"{passed} passed, 0 failed")


if __name__ == "__main__":
    main()
