// Makes a fixed list of calls with the official OpenAI and Anthropic clients against a base URL
// (node calls.mjs BASE_URL API_KEY) and prints, as one JSON document, what each call yields:
// the response object, or every event of a stream in order. server's TestOfficialClients runs it
// straight against the fake LLM and through dianad, and compares the two.
//
// Each call has a prompt and an output cap: the fake's answer, and the tokens it counts (a
// token per 4 bytes of the prompt, rounded up, and max_tokens), follow from them alone.
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';

const [base, apiKey] = process.argv.slice(2);
if (!base || !apiKey) {
  console.error('usage: node calls.mjs BASE_URL API_KEY');
  process.exit(2);
}
// No retries: a failed call fails the run instead of being hidden by a second try.
const openai = new OpenAI({ baseURL: base + '/v1', apiKey, maxRetries: 0, timeout: 30000 });
const anthropic = new Anthropic({ baseURL: base, apiKey, maxRetries: 0, timeout: 30000 });

async function all(stream) {
  const out = [];
  for await (const x of stream) out.push(x);
  return out;
}

const chat = (prompt, max, more) =>
  openai.chat.completions.create({ model: 'gpt-4o', messages: [{ role: 'user', content: prompt }], max_completion_tokens: max, ...more });
const responses = (prompt, max, more) =>
  openai.responses.create({ model: 'gpt-4.1', input: prompt, max_output_tokens: max, ...more });
const messages = { model: 'claude-sonnet-4-5' };

const calls = [
  { client: 'openai', name: 'chat', prompt: 'Say tok three times.', max_tokens: 3,
    run: (p, m) => chat(p, m) },
  { client: 'openai', name: 'chat stream', prompt: 'Stream tok, without asking for the usage.', max_tokens: 4,
    run: async (p, m) => all(await chat(p, m, { stream: true })) },
  { client: 'openai', name: 'chat stream with usage', prompt: 'Stream tok and the usage.', max_tokens: 5,
    run: async (p, m) => all(await chat(p, m, { stream: true, stream_options: { include_usage: true } })) },
  { client: 'openai', name: 'chat.completions.stream finalChatCompletion', prompt: 'Stream tok through the helper.', max_tokens: 5,
    run: (p, m) => openai.chat.completions.stream({ model: 'gpt-4o', messages: [{ role: 'user', content: p }], max_completion_tokens: m }).finalChatCompletion() },
  { client: 'openai', name: 'completions stream', prompt: 'Complete this: tok', max_tokens: 4,
    run: async (p, m) => all(await openai.completions.create({ model: 'gpt-3.5-turbo-instruct', prompt: p, max_tokens: m, stream: true })) },
  // The client asks for base64 vectors unless told otherwise.
  { client: 'openai', name: 'embeddings', prompt: 'Embed this sentence.', max_tokens: 0,
    run: (p) => openai.embeddings.create({ model: 'text-embedding-3-small', input: p }) },
  { client: 'openai', name: 'responses', prompt: 'Answer with tok.', max_tokens: 6,
    run: (p, m) => responses(p, m) },
  { client: 'openai', name: 'responses stream', prompt: 'Stream the answer, tok by tok.', max_tokens: 7,
    run: async (p, m) => all(await responses(p, m, { stream: true })) },
  { client: 'anthropic', name: 'messages', prompt: 'Hello, Claude.', max_tokens: 8,
    run: (p, m) => anthropic.messages.create({ ...messages, max_tokens: m, messages: [{ role: 'user', content: p }] }) },
  { client: 'anthropic', name: 'messages stream', prompt: 'Hello again, Claude: stream it.', max_tokens: 9,
    run: async (p, m) => all(await anthropic.messages.create({ ...messages, max_tokens: m, messages: [{ role: 'user', content: p }], stream: true })) },
  { client: 'anthropic', name: 'messages.stream finalMessage', prompt: 'One last time.', max_tokens: 10,
    run: (p, m) => anthropic.messages.stream({ ...messages, max_tokens: m, messages: [{ role: 'user', content: p }] }).finalMessage() },
];

const out = [];
for (const { run, ...call } of calls) {
  out.push({ ...call, yield: await run(call.prompt, call.max_tokens) });
}
process.stdout.write(JSON.stringify(out) + '\n');
