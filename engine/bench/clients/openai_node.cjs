// The official `openai` Node package against the server (the same checks as openai_py.py;
// shapes in checks.py). Run by __main__.py with NODE_PATH set to its node_modules.
const OpenAI = require("openai");
const version = require("openai/version").VERSION;

const env = process.env;
const c = new OpenAI({ baseURL: env.TANDEM_URL, apiKey: "none", maxRetries: 0 });
const t = new OpenAI({ baseURL: env.TANDEM_TOOLS_URL || env.TANDEM_URL, apiKey: "none", maxRetries: 0 });
const MODEL = env.TANDEM_MODEL, TOOLS_MODEL = env.TANDEM_TOOLS_MODEL;
const ASK = [{ role: "user", content: "What is the capital of France? One word." }];
const CITY = { type: "object", properties: {
  city: { type: "string", maxLength: 20 },
  population: { type: "integer", minimum: 0, maximum: 99999999 } },
  required: ["city", "population"], additionalProperties: false };
const WEATHER = { type: "function", function: {
  name: "get_weather", description: "The weather in a city now",
  parameters: { type: "object", properties: {
    city: { type: "string", maxLength: 8 }, days: { type: "integer", minimum: 1, maximum: 5 } },
    required: ["city", "days"], additionalProperties: false } } };
const REQUIRED = { tools: [WEATHER], tool_choice: "required", parallel_tool_calls: false };
const HISTORY = [{ role: "user", content: "Weather in Paris?" },
  { role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function",
    function: { name: "get_weather", arguments: '{"city": "Paris", "days": 1}' } }] },
  { role: "tool", tool_call_id: "call_1", content: '{"temp_c": 21, "sky": "clear"}' }];

function expect(cond, what) { if (!cond) throw new Error(JSON.stringify(what).slice(0, 300)); }
function checkCity(text) {
  const o = JSON.parse(text);
  expect(Object.keys(o).sort().join() === "city,population", o);
  expect(typeof o.city === "string" && Number.isInteger(o.population), o);
  return text;
}
function checkArgs(text) {
  const a = JSON.parse(text);
  expect(Object.keys(a).sort().join() === "city,days" && a.days >= 1 && a.days <= 5, a);
  return text;
}

const checks = [
  ["models.list/retrieve", false, async () => {
    const ids = [];
    for await (const m of c.models.list()) ids.push(m.id);
    expect(ids.length === 1 && ids[0] === MODEL, ids);
    return (await c.models.retrieve(MODEL)).id;
  }],
  ["chat", false, async () => {
    const r = await c.chat.completions.create({ model: MODEL, messages: ASK, max_tokens: 16, temperature: 0 });
    expect(r.choices[0].message.content && r.usage.prompt_tokens > 0, r);
    return r.choices[0].message.content;
  }],
  ["stream + include_usage", false, async () => {
    const s = await c.chat.completions.create({ model: MODEL, messages: ASK, max_tokens: 16,
      stream: true, stream_options: { include_usage: true } });
    let text = "", last = null, n = 0;
    for await (const ch of s) { n++; last = ch; if (ch.choices.length) text += ch.choices[0].delta.content || ""; }
    expect(text && last.usage && last.usage.completion_tokens > 0 && !last.choices.length, last);
    return `${n} chunks, usage ${last.usage.total_tokens}`;
  }],
  ["json_schema", false, async () => {
    const r = await c.chat.completions.create({ model: MODEL, messages: ASK, max_tokens: 100, temperature: 0,
      response_format: { type: "json_schema", json_schema: { name: "city", schema: CITY, strict: true } } });
    return checkCity(r.choices[0].message.content);
  }],
  ["tools on the built-in: 400", false, async () => {
    try {
      await c.chat.completions.create({ model: MODEL, messages: ASK, tools: [WEATHER], max_tokens: 8 });
    } catch (e) {
      expect(e instanceof OpenAI.BadRequestError && e.param === "tools", String(e));
      return "400, param tools";
    }
    throw new Error("tools were accepted by a template without a tool format");
  }],
  ["history with tool_calls + tool", false, async () => {
    const r = await c.chat.completions.create({ model: MODEL, messages: HISTORY, max_tokens: 16, temperature: 0 });
    return r.choices[0].message.content;
  }],
  ["tool_choice required", true, async () => {
    const r = await t.chat.completions.create({ model: TOOLS_MODEL, messages: ASK, max_tokens: 200, temperature: 0, ...REQUIRED });
    expect(r.choices[0].finish_reason === "tool_calls", r.choices[0]);
    return checkArgs(r.choices[0].message.tool_calls[0].function.arguments);
  }],
  ["tool call streamed (stream helper)", true, async () => {
    const s = t.chat.completions.stream({ model: TOOLS_MODEL, messages: ASK, max_tokens: 200, temperature: 0, ...REQUIRED });
    const final = (await s.finalChatCompletion()).choices[0];
    expect(final.finish_reason === "tool_calls", final);
    return checkArgs(final.message.tool_calls[0].function.arguments);
  }],
  ["tool_calls round trip", true, async () => {
    const r = await t.chat.completions.create({ model: TOOLS_MODEL, messages: ASK, max_tokens: 200, temperature: 0, ...REQUIRED });
    const msg = r.choices[0].message, call = msg.tool_calls[0];
    const again = await t.chat.completions.create({ model: TOOLS_MODEL, max_tokens: 16, temperature: 0,
      messages: [...ASK, msg, { role: "tool", tool_call_id: call.id, content: '{"temp_c": 21}' }],
      tools: [WEATHER], tool_choice: "none" });
    expect(["stop", "length"].includes(again.choices[0].finish_reason), again);
    return `call ${call.id} answered`;
  }],
  ["responses.create", false, async () => {
    const r = await c.responses.create({ model: MODEL, input: "What is the capital of France?", max_output_tokens: 16, temperature: 0 });
    expect(r.output_text, r);
    return r.output_text;
  }],
  ["responses stream", false, async () => {
    const s = await c.responses.create({ model: MODEL, input: "Say hello.", max_output_tokens: 16, stream: true });
    const kinds = [];
    for await (const e of s) kinds.push(e.type);
    expect(kinds[0] === "response.created" && ["response.completed", "response.incomplete"].includes(kinds.at(-1)), kinds);
    return `${kinds.length} events, last ${kinds.at(-1)}`;
  }],
  ["responses json_schema", false, async () => {
    const r = await c.responses.create({ model: MODEL, input: "Name a city.", max_output_tokens: 100, temperature: 0,
      text: { format: { type: "json_schema", name: "city", schema: CITY, strict: true } } });
    return checkCity(r.output_text);
  }],
  ["responses function_call", true, async () => {
    const r = await t.responses.create({ model: TOOLS_MODEL, input: "Weather in Paris?", max_output_tokens: 200,
      temperature: 0, tools: [{ type: "function", ...WEATHER.function }], tool_choice: "required" });
    const call = r.output.find((o) => o.type === "function_call");
    expect(call && call.name === "get_weather", r.output);
    return checkArgs(call.arguments);
  }],
  ["logprobs + top_logprobs", false, async () => {
    const r = await c.chat.completions.create({ model: MODEL, messages: ASK, max_tokens: 4, temperature: 0,
      logprobs: true, top_logprobs: 2 });
    const content = r.choices[0].logprobs.content;
    expect(content.length === r.usage.completion_tokens && content[0].top_logprobs.length === 2, content);
    return `${content.length} tokens, first ${JSON.stringify(content[0].token)} ${content[0].logprob.toFixed(3)}`;
  }],
  ["responses.stream helper", false, async () => {
    const s = c.responses.stream({ model: MODEL, input: "Say hello.", max_output_tokens: 64 });
    const kinds = [];
    s.on("event", (e) => kinds.push(e.type));
    try {
      const final = await s.finalResponse();
      expect(final.output_text, final);
      return `${kinds.length} events, ${final.status}`;
    } catch (e) {   // cut at max_output_tokens: OpenAI's response.incomplete, not completed
      expect(kinds.at(-1) === "response.incomplete", [String(e), kinds.slice(-3)]);
      return `${kinds.length} events, response.incomplete (${String(e).slice(0, 60)})`;
    }
  }],
];

(async () => {
  for (const [name, tools, fn] of checks) {
    const row = { client: "openai (Node)", version, check: name, ok: true, detail: "" };
    if (tools && !env.TANDEM_TOOLS_URL) { row.ok = null; row.detail = "skipped: no tools server"; }
    else {
      try { row.detail = String(await fn()).slice(0, 200); }
      catch (e) { row.ok = false; row.detail = String(e && e.stack || e).slice(0, 400); }
    }
    console.log(JSON.stringify(row));
  }
})();
