// Drives warmcache's Dapr state API over HTTP with the unmodified @dapr/dapr
// SDK, as a Dapr application does. The client finds warmcache through the
// SDK's own address setting, the DAPR_HTTP_ENDPOINT environment variable;
// STORE names the state store (a warmcache namespace with text keys).
// It prints one line per check and "N passed, N failed" at the end, and
// exits non-zero if a check failed.
"use strict";

const assert = require("node:assert/strict");
const {
  DaprClient,
  CommunicationProtocolEnum,
  StateConcurrencyEnum,
  StateConsistencyEnum,
} = require("@dapr/dapr");

const store = process.env.STORE || "statestore";
const prefix = `node-${process.pid}-`;
const key = (k) => prefix + k;

// The error the SDK throws for a non-2xx answer is a JSON text with the
// status and the body; errorBody returns Dapr's {errorCode, message}.
function errorBody(e) {
  const outer = JSON.parse(e.message);
  return { status: outer.status, ...JSON.parse(outer.error_msg) };
}

async function main() {
  if (!process.env.DAPR_HTTP_ENDPOINT) {
    throw new Error("DAPR_HTTP_ENDPOINT is not set");
  }
  const client = new DaprClient({ communicationProtocol: CommunicationProtocolEnum.HTTP });
  const checks = [];
  const check = (name, fn) => checks.push({ name, fn });

  check("start: the SDK's sidecar probe (GET /v1.0/metadata) passes", async () => {
    await client.start();
  });

  check("save and get", async () => {
    const res = await client.state.save(store, [{ key: key("order-1"), value: { qty: 1, item: "book" } }]);
    assert.equal(res.error, undefined, `save failed: ${res.error}`);
    const got = await client.state.get(store, key("order-1"));
    assert.deepEqual(got, { qty: 1, item: "book" });
    const strong = await client.state.get(store, key("order-1"), { consistency: StateConsistencyEnum.CONSISTENCY_STRONG });
    assert.deepEqual(strong, { qty: 1, item: "book" });
  });

  check("get of an absent key is empty", async () => {
    const got = await client.state.get(store, key("never"));
    assert.equal(got, "");
  });

  check("bulk get returns ETags and absent keys", async () => {
    await client.state.save(store, [
      { key: key("b1"), value: { n: 1 } },
      { key: key("b2"), value: "two" },
    ]);
    const items = await client.state.getBulk(store, [key("b1"), key("missing"), key("b2")]);
    assert.equal(items.length, 3);
    assert.deepEqual(items[0].data, { n: 1 });
    assert.match(items[0].etag, /^[0-9]+$/);
    assert.equal(items[1].key, key("missing"));
    assert.equal(items[1].data, undefined);
    assert.equal(items[2].data, "two");
  });

  check("first-write save with a stale ETag fails with 409 ERR_STATE_SAVE", async () => {
    await client.state.save(store, [{ key: key("acct"), value: { balance: 10 } }]);
    const [v1] = await client.state.getBulk(store, [key("acct")]);
    const ok = await client.state.save(store, [
      { key: key("acct"), value: { balance: 20 }, etag: v1.etag, options: { concurrency: StateConcurrencyEnum.CONCURRENCY_FIRST_WRITE } },
    ]);
    assert.equal(ok.error, undefined, `save at the current ETag failed: ${ok.error}`);
    const stale = await client.state.save(store, [
      { key: key("acct"), value: { balance: 30 }, etag: v1.etag, options: { concurrency: StateConcurrencyEnum.CONCURRENCY_FIRST_WRITE } },
    ]);
    assert.ok(stale.error, "a save at a stale ETag succeeded");
    const body = errorBody(stale.error);
    assert.equal(body.status, 409);
    assert.equal(body.errorCode, "ERR_STATE_SAVE");
    assert.match(body.message, /possible etag mismatch/);
    assert.deepEqual(await client.state.get(store, key("acct")), { balance: 20 });
  });

  check("delete with a stale ETag fails, with the current one succeeds", async () => {
    const [cur] = await client.state.getBulk(store, [key("acct")]);
    const stale = await client.state.delete(store, key("acct"), {
      etag: String(Number(cur.etag) - 1),
      concurrency: StateConcurrencyEnum.CONCURRENCY_FIRST_WRITE,
    });
    assert.ok(stale.error, "a delete at a stale ETag succeeded");
    assert.equal(errorBody(stale.error).errorCode, "ERR_STATE_DELETE");
    const ok = await client.state.delete(store, key("acct"), { etag: cur.etag });
    assert.equal(ok.error, undefined, `delete at the current ETag failed: ${ok.error}`);
    assert.equal(await client.state.get(store, key("acct")), "");
  });

  check("a transaction commits all its operations", async () => {
    await client.state.save(store, [{ key: key("tx-old"), value: 1 }]);
    await client.state.transaction(store, [
      { operation: "upsert", request: { key: key("tx-a"), value: { a: 1 } } },
      { operation: "upsert", request: { key: key("tx-b"), value: { b: 1 } } },
      { operation: "delete", request: { key: key("tx-old") } },
    ]);
    const items = await client.state.getBulk(store, [key("tx-a"), key("tx-b"), key("tx-old")]);
    assert.deepEqual(items.map((i) => i.data), [{ a: 1 }, { b: 1 }, undefined]);
  });

  check("a transaction with a stale ETag writes nothing (500 ERR_STATE_TRANSACTION)", async () => {
    await assert.rejects(
      client.state.transaction(store, [
        { operation: "upsert", request: { key: key("tx-c"), value: { c: 1 } } },
        { operation: "delete", request: { key: key("tx-a"), etag: "1", options: { concurrency: StateConcurrencyEnum.CONCURRENCY_FIRST_WRITE } } },
      ]),
      (e) => {
        const body = errorBody(e);
        assert.equal(body.status, 500);
        assert.equal(body.errorCode, "ERR_STATE_TRANSACTION");
        return true;
      },
    );
    assert.equal(await client.state.get(store, key("tx-c")), "");
    assert.deepEqual(await client.state.get(store, key("tx-a")), { a: 1 });
  });

  check("ttlInSeconds makes the item expire; a malformed one is refused with Dapr's error shape", async () => {
    const res = await client.state.save(store, [{ key: key("ttl"), value: 1, metadata: { ttlInSeconds: "2" } }]);
    assert.ok(!res.error, `a save with ttlInSeconds 2 failed: ${res.error}`);
    assert.equal(await client.state.get(store, key("ttl")), 1);
    await new Promise((resolve) => setTimeout(resolve, 3000));
    assert.equal(await client.state.get(store, key("ttl")), "", "the item is still served a second after its TTL");
    const bad = await client.state.save(store, [{ key: key("ttl"), value: 1, metadata: { ttlInSeconds: "soon" } }]);
    assert.ok(bad.error, "a save with ttlInSeconds soon succeeded");
    const body = errorBody(bad.error);
    assert.equal(body.status, 400);
    assert.equal(body.errorCode, "ERR_MALFORMED_REQUEST");
    assert.match(body.message, /ttlInSeconds/);
  });

  check("an unknown store answers ERR_STATE_STORE_NOT_FOUND", async () => {
    await assert.rejects(client.state.get("nostore", "k"), (e) => {
      const body = errorBody(e);
      assert.equal(body.status, 400);
      assert.equal(body.errorCode, "ERR_STATE_STORE_NOT_FOUND");
      return true;
    });
  });

  check("the query API is refused as not supported", async () => {
    await assert.rejects(client.state.query(store, { filter: {} }), (e) => {
      assert.equal(errorBody(e).errorCode, "ERR_STATE_STORE_NOT_SUPPORTED");
      return true;
    });
  });

  let passed = 0;
  let failed = 0;
  for (const c of checks) {
    try {
      await c.fn();
      passed++;
      console.log(`ok: ${c.name}`);
    } catch (e) {
      failed++;
      console.log(`FAIL: ${c.name}: ${e && e.stack ? e.stack : e}`);
    }
  }
  await client.stop();
  console.log(`${passed} passed, ${failed} failed`);
  process.exitCode = failed === 0 && passed === checks.length ? 0 : 1;
}

main().catch((e) => {
  console.log(`FAIL: ${e && e.stack ? e.stack : e}`);
  process.exitCode = 1;
});
