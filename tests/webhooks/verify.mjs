// Verifies webhook deliveries with the official Standard Webhooks library (npm
// `standardwebhooks`), not with codebuffd's own code: tests/webhooks.rs records what its
// receiver got and runs this.
//
// Usage: node verify.mjs < deliveries.jsonl, with WEBHOOK_SECRET=whsec_… in the environment.
// Each input line: {"headers": {"webhook-id": …, "webhook-timestamp": …,
// "webhook-signature": …}, "body": "<the raw body as received>"}.
// Prints one line per delivery: {"ok": true, "payload": <the verified, parsed body>} or
// {"ok": false, "error": "…"}; exits 1 if any delivery fails verification.

import { createInterface } from "node:readline";
import { Webhook } from "standardwebhooks";

const secret = process.env.WEBHOOK_SECRET;
if (!secret) {
  console.error("verify.mjs: set WEBHOOK_SECRET");
  process.exit(2);
}
// The library takes the secret with its `whsec_` prefix, as Standard Webhooks issue it.
const wh = new Webhook(secret);
let failed = 0;
for await (const line of createInterface({ input: process.stdin })) {
  if (!line.trim()) continue;
  const { headers, body } = JSON.parse(line);
  try {
    const payload = wh.verify(body, headers);
    console.log(JSON.stringify({ ok: true, payload }));
  } catch (error) {
    failed += 1;
    console.log(JSON.stringify({ ok: false, error: String(error && error.message || error) }));
  }
}
process.exit(failed ? 1 : 0);
