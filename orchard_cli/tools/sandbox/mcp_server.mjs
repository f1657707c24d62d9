// orchard's task tools as an MCP server over stdio, run INSIDE the sandbox by a harness
// (OpenClaw, Codex, ZeroClaw) on the Node orchard mounts:
//
//   node /opt/orchard/tools/mcp_server.mjs
//
// Environment: ORCHARD_TOOLS_URL (the episode's tool gateway, `.../e/<token>/tools`) and
// ORCHARD_TOOLS_TOKEN (its Bearer token); ORCHARD_MCP_SDK, the @modelcontextprotocol/sdk package
// folder (default: where orchard mounts it); ORCHARD_TOOLS_TIMEOUT_S, one call's limit (120);
// ORCHARD_TOOLS_MAX_ARGS_BYTES, the most one call's arguments may hold (the gateway refuses more:
// checked here before sending, with the gateway's words).
//
// tools/list is the gateway's `GET {url}`; each tools/call is `POST {url}/{name}` with the
// arguments, its reply's `result` going back as text content (JSON), `isError` when `ok` is false.
// The low-level `Server` of the official SDK is used: the schemas are JSON Schema, passed through
// as the task declared them (the high-level `McpServer` wants zod schemas).

import path from "node:path";
import { pathToFileURL } from "node:url";

const SDK = process.env.ORCHARD_MCP_SDK
  || "/opt/orchard/harnesses/mcp/node_modules/@modelcontextprotocol/sdk";
const URL_ = (process.env.ORCHARD_TOOLS_URL || "").replace(/\/+$/, "");
const TOKEN = process.env.ORCHARD_TOOLS_TOKEN || "";
const TIMEOUT_MS = 1000 * Number(process.env.ORCHARD_TOOLS_TIMEOUT_S || 120);
const ARGS_LIMIT = Number(process.env.ORCHARD_TOOLS_MAX_ARGS_BYTES || 1048576);

function fail(message) {
  process.stderr.write(`orchard mcp_server: ${message}\n`);
  process.exit(2);
}

if (!URL_ || !TOKEN) fail("ORCHARD_TOOLS_URL and ORCHARD_TOOLS_TOKEN must be set");

async function load(relative) {
  try {
    return await import(pathToFileURL(path.join(SDK, "dist/esm", relative)).href);
  } catch (err) {
    fail(`cannot load the MCP SDK from ${SDK} (is it mounted? scripts/install-harnesses.sh mcp): ${err.message}`);
  }
}

const { Server } = await load("server/index.js");
const { StdioServerTransport } = await load("server/stdio.js");
const { ListToolsRequestSchema, CallToolRequestSchema } = await load("types.js");

async function gateway(method, suffix, body) {
  const response = await fetch(URL_ + suffix, {
    method,
    headers: { Authorization: `Bearer ${TOKEN}`, "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(TIMEOUT_MS),
  });
  const text = await response.text();
  let data;
  try {
    data = JSON.parse(text);
  } catch {
    data = null;
  }
  return { status: response.status, data, text };
}

// The message of a reply that is not a ToolReply (401/404 come as {"error": {"message": ...}}).
function errorOf({ status, data, text }) {
  const error = data && data.error;
  const message = typeof error === "string" ? error : (error && error.message) || text.slice(0, 500);
  return `tool gateway answered HTTP ${status}: ${message}`;
}

async function listTools() {
  const reply = await gateway("GET", "");
  if (reply.status !== 200 || !reply.data || !Array.isArray(reply.data.tools)) throw new Error(errorOf(reply));
  return reply.data.tools.map((t) => ({
    name: t.name,
    description: t.description || "",
    inputSchema: t.input_schema || { type: "object", properties: {} },
  }));
}

function text(value, isError) {
  return { content: [{ type: "text", text: value }], isError };
}

async function callTool(name, args) {
  const size = Buffer.byteLength(JSON.stringify(args || {}), "utf8");
  if (size > ARGS_LIMIT) {
    return text(`the arguments are ${size} bytes, over the ${ARGS_LIMIT} bytes one tool call may send: `
      + "send less at once (write large content to a file in the workspace instead)", true);
  }
  let reply;
  try {
    reply = await gateway("POST", `/${encodeURIComponent(name)}`, args || {});
  } catch (err) {
    return text(`tool gateway unreachable: ${err.message}`, true);
  }
  const data = reply.data;
  if (!data || typeof data.ok !== "boolean") return text(errorOf(reply), true);
  if (!data.ok) return text(data.error || `the tool failed (status ${data.status})`, true);
  // A text result (a web page's observation) goes as it is; anything else as JSON.
  return text(typeof data.result === "string" ? data.result : JSON.stringify(data.result ?? null), false);
}

const server = new Server({ name: "orchard-task-tools", version: "1.0.0" }, { capabilities: { tools: {} } });
server.setRequestHandler(ListToolsRequestSchema, async () => ({ tools: await listTools() }));
server.setRequestHandler(CallToolRequestSchema, async (request) =>
  callTool(request.params.name, request.params.arguments));
await server.connect(new StdioServerTransport());
