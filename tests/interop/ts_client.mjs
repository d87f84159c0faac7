// Interop check: the official TypeScript SDK v2 client (`@modelcontextprotocol/client`) as a host
// of mcpmux, run by tests/interop/interop.rs against a daemon with test upstreams `alpha` and
// `beta` (both with `--protocol-tools`):
//
//     node ts_client.mjs URL [2026-07-28|auto]
//
// `MCP_CLIENT_MODULE` names the SDK's entry file (the tests install it under target/). The client
// declares elicitation, sampling and roots and answers each through its handlers; on 2026-07-28
// those requests reach it as `input_required` rounds, which the SDK fulfils and retries by itself.
// It lists tools, calls tools (one that samples, one that elicits twice, one that asks for
// roots), gets a prompt, reads a resource and calls an unknown tool, then prints one JSON summary
// line; on any failure the summary has `error` and the exit status is 1.
import { pathToFileURL } from 'node:url';

const { Client, StreamableHTTPClientTransport } = await import(
  pathToFileURL(process.env.MCP_CLIENT_MODULE).href
);
const [url, mode] = [process.argv[2], process.argv[3] ?? '2026-07-28'];
const client = new Client(
  { name: 'mcpmux-interop-ts', version: '0' },
  {
    capabilities: { elicitation: {}, sampling: {}, roots: {} },
    versionNegotiation: { mode: mode === 'auto' ? 'auto' : { pin: mode } },
  },
);
const asked = [];
client.setRequestHandler('elicitation/create', async (request) => {
  asked.push(request.params.message);
  return { action: 'accept', content: { name: `ts-${asked.length}` } };
});
client.setRequestHandler('sampling/createMessage', async (request) => ({
  role: 'assistant',
  model: 'ts-model',
  content: { type: 'text', text: `sampled ${request.params.messages[0].content.text}` },
}));
client.setRequestHandler('roots/list', async () => ({ roots: [{ uri: 'file:///ts', name: 'ts' }] }));

const summary = { mode };
try {
  await client.connect(new StreamableHTTPClientTransport(new URL(url)));
  summary.protocol_version = client.getNegotiatedProtocolVersion();
  summary.server = client.getServerVersion()?.name ?? null;
  summary.tools = (await client.listTools()).tools.map((t) => t.name).sort();
  const text = (result) => result.content?.[0]?.text;
  const echo = await client.callTool({ name: 'alpha__echo', arguments: { text: 'hi' } });
  summary.echo = echo.structuredContent?.upstream;
  summary.sample = text(await client.callTool({ name: 'alpha__sample', arguments: { prompt: 'capital?' } }));
  summary.elicit = text(await client.callTool({ name: 'beta__elicit', arguments: { rounds: 2 } }));
  summary.roots = text(await client.callTool({ name: 'alpha__roots', arguments: {} }));
  const prompt = await client.getPrompt({ name: 'alpha__greet', arguments: { name: 'Ada' } });
  summary.prompt = prompt.messages[0].content.text;
  summary.read = (await client.readResource({ uri: 'beta+test://beta/hello' })).contents[0].text;
  try {
    await client.callTool({ name: 'gamma__echo', arguments: {} });
  } catch (e) {
    summary.unknown_tool_error = e.code ?? String(e);
  }
  summary.asked = asked;
  summary.ok = true;
  await client.close();
} catch (e) {
  summary.error = String(e?.stack ?? e);
}
console.log(JSON.stringify(summary));
process.exit(summary.ok ? 0 : 1);
