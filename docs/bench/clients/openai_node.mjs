// openai-node (the official TypeScript/JavaScript SDK, from npm): chat, stream with usage,
// structured output (json_schema), the SDK's runTools round trip, the Responses API, errors,
// usage, embeddings. One line per check, then the count, as suite.py prints.
// Usage: node openai_node.mjs BASE_URL [EMBED_BASE_URL]   (CLIENT_SUITE_NPM: the npm prefix)
import { createRequire } from "node:module";
import path from "node:path";

const require = createRequire(path.join(process.env.CLIENT_SUITE_NPM, "package.json"));
const mod = require("openai");
const OpenAI = mod.OpenAI ?? mod.default ?? mod;

const [base, embedBase] = process.argv.slice(2);
const ASK = "Name one colour of the rainbow. Answer in one word.";
const WEATHER = { type: "function", function: { name: "get_weather",
  description: "Get the current weather in a city",
  parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } } };

const client = (b) => new OpenAI({ baseURL: `${b}/v1`, apiKey: "x", maxRetries: 0, timeout: 120000 });
const served = async (b) => (await client(b).models.list()).data[0].id;
const expect = (cond, msg) => { if (!cond) throw new Error(msg); };

const model = await served(base);
const embedModel = embedBase ? await served(embedBase) : null;
const c = client(base);
const chat = (kw) => c.chat.completions.create({ model, temperature: 0, max_tokens: 32, ...kw });

const checks = {
  async chat_completion() {
    const r = await chat({ messages: [{ role: "user", content: ASK }] });
    expect(r.choices[0].message.content?.trim(), "empty content");
  },
  async stream_with_usage() {
    const whole = await chat({ messages: [{ role: "user", content: ASK }] });
    let text = "", usage = null;
    for await (const chunk of await chat({ messages: [{ role: "user", content: ASK }], stream: true,
                                           stream_options: { include_usage: true } })) {
      if (chunk.usage) usage = chunk.usage;
      for (const ch of chunk.choices) text += ch.delta?.content ?? "";
    }
    expect(text === whole.choices[0].message.content, `stream ${JSON.stringify(text)} != ${JSON.stringify(whole.choices[0].message.content)}`);
    expect(usage?.completion_tokens === whole.usage.completion_tokens, `usage ${JSON.stringify(usage)}`);
  },
  async structured_output() {
    const schema = { type: "object", properties: { country: { type: "string" }, city: { type: "string" } },
                     required: ["country", "city"], additionalProperties: false };
    const r = await chat({ max_tokens: 80, messages: [{ role: "user", content: "What is the capital of France? Give the country and its capital city." }],
      response_format: { type: "json_schema", json_schema: { name: "capital", schema, strict: true } } });
    const obj = JSON.parse(r.choices[0].message.content);
    expect(/paris/i.test(obj.city), `parsed ${JSON.stringify(obj)}`);
  },
  async run_tools_round_trip() {
    const completions = c.chat.completions.runTools ? c.chat.completions : c.beta.chat.completions;
    let called = 0;
    const runner = completions.runTools({ model, temperature: 0, max_tokens: 80,
      messages: [{ role: "user", content: "What is the weather like in Paris right now?" }],
      tools: [{ type: "function", function: { ...WEATHER.function, parse: JSON.parse,
        function: (args) => { called += 1; expect(/paris/i.test(args.city), `arguments ${JSON.stringify(args)}`); return "18 degrees Celsius and cloudy"; } } }] },
      { maxChatCompletions: 3 });
    const answer = await runner.finalContent();
    expect(called === 1, `the tool was called ${called} times`);
    expect(answer?.trim(), `final content ${JSON.stringify(answer)}`);
  },
  async responses_create() {
    const r = await c.responses.create({ model, input: ASK, temperature: 0, max_output_tokens: 32 });
    expect(r.output_text?.trim(), `output_text ${JSON.stringify(r.output_text)}`);
  },
  async error_bad_request() {
    try { await chat({ messages: [{ role: "user", content: ASK }], temperature: -1 }); }
    catch (e) { expect(e instanceof OpenAI.BadRequestError, `error ${e?.constructor?.name}: ${e?.message}`); return; }
    throw new Error("temperature -1 was accepted");
  },
  async usage() {
    const r = await chat({ messages: [{ role: "user", content: ASK }] });
    const u = r.usage;
    expect(u.prompt_tokens > 0 && u.completion_tokens > 0 && u.total_tokens === u.prompt_tokens + u.completion_tokens, `usage ${JSON.stringify(u)}`);
  },
  async embeddings() {
    const e = client(embedBase);
    const r = await e.embeddings.create({ model: embedModel, input: ["The cat sat on the mat.", "A dog barked at the mailman."] });
    expect(r.data.length === 2 && r.data[0].embedding.length === 384, `${r.data.length} vectors of ${r.data[0]?.embedding?.length}`);
    const f = await e.embeddings.create({ model: embedModel, input: "The cat sat on the mat.", encoding_format: "float" });
    const diff = Math.max(...f.data[0].embedding.map((x, i) => Math.abs(x - r.data[0].embedding[i])));
    expect(diff < 1e-6, `float and base64 vectors differ by ${diff}`);
  },
};

let passed = 0, failed = 0;
for (const [name, fn] of Object.entries(checks)) {
  const t0 = Date.now();
  if (name === "embeddings" && !embedBase) { console.log("SKIP openai-node.embeddings: no embedding server given (--embed-base-url)"); continue; }
  try { await fn(); console.log(`PASS openai-node.${name} (${((Date.now() - t0) / 1000).toFixed(1)} s)`); passed++; }
  catch (e) { console.log(`FAIL openai-node.${name}: ${String(e?.message ?? e).replace(/\s+/g, " ").slice(0, 300)} (${((Date.now() - t0) / 1000).toFixed(1)} s)`); failed++; }
}
console.log(`node: ${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
