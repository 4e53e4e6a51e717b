// The harness-run dashboard: plain DOM, no framework, no build step.
// Every piece of text from the server or the agent goes into the page through textContent or a
// text node, never parsed as markup (no HTML-string sink anywhere): agent output is untrusted.
// The API key lives in this tab's sessionStorage and goes out as "Authorization: Bearer"; the
// event stream is read with fetch() (EventSource cannot send that header).
"use strict";

(() => {
  const KEY_NAME = "harness-run.api-key";
  const LIST_EVERY_MS = 3000;
  const RECORD_EVERY_MS = 5000;
  const RECONNECT_MS = 1000;
  const SHOWN_CHARS = 20000;
  const STREAM_LOST = "The event stream was interrupted";
  const WAITING = "waiting for approval";

  const $ = (id) => document.getElementById(id);
  let apiKey = sessionStorage.getItem(KEY_NAME);
  let listTimer = null;
  let current = null; // the open session view: {sid, abort, lastId, tools, pending, ...}

  // --- small helpers ----------------------------------------------------------------------------

  function el(tag, cls, text) {
    const node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function clip(text) {
    const s = String(text ?? "");
    return s.length > SHOWN_CHARS ? `${s.slice(0, SHOWN_CHARS)}\n… (${s.length - SHOWN_CHARS} more characters)` : s;
  }

  function money(cost) {
    return typeof cost === "number" ? `$${cost.toFixed(4)}` : "—";
  }

  function when(stamp) {
    return typeof stamp === "number" ? new Date(stamp * 1000).toLocaleString() : "";
  }

  const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

  function notice(message) {
    const box = $("notice");
    box.textContent = message || "";
    box.hidden = !message;
  }

  function show(section) {
    for (const id of ["login", "sessions", "session"]) $(id).hidden = id !== section;
    $("logout").hidden = section === "login";
  }

  // --- the API ------------------------------------------------------------------------------------

  class ApiError extends Error {
    constructor(status, message) {
      super(message);
      this.status = status;
    }
  }

  async function api(method, path, body) {
    const init = { method, headers: { Authorization: `Bearer ${apiKey}` }, cache: "no-store" };
    if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const response = await fetch(path, init);
    const raw = await response.text();
    let data = null;
    try {
      data = raw ? JSON.parse(raw) : null;
    } catch {
      data = null;
    }
    if (!response.ok) {
      const message = data && typeof data.message === "string" ? data.message : `HTTP ${response.status}`;
      throw new ApiError(response.status, message);
    }
    return data;
  }

  // A failed call: a refused key signs out, anything else is shown above the page.
  function failed(error) {
    if (error instanceof ApiError && error.status === 401) {
      signOut(`The server refused the key: ${error.message}`);
    } else {
      notice(error instanceof Error ? error.message : String(error));
    }
  }

  const sessionPath = (sid, rest = "") => `/v1/sessions/${encodeURIComponent(sid)}${rest}`;

  // --- sign in / out --------------------------------------------------------------------------

  function signOut(message) {
    apiKey = null;
    sessionStorage.removeItem(KEY_NAME);
    leave();
    show("login");
    const err = $("login-error");
    err.textContent = message || "";
    err.hidden = !message;
    $("key").value = "";
    $("key").focus();
  }

  async function signIn(event) {
    event.preventDefault();
    const given = $("key").value.trim();
    if (!given) return;
    apiKey = given;
    try {
      await api("GET", "/v1/engines");
    } catch (error) {
      apiKey = null;
      const err = $("login-error");
      err.textContent =
        error instanceof ApiError && error.status === 401
          ? "Wrong, revoked or mistyped key: the server answered 401. Check the key and try again."
          : `Could not reach the server: ${error.message}`;
      err.hidden = false;
      return;
    }
    sessionStorage.setItem(KEY_NAME, given);
    $("login-error").hidden = true;
    $("key").value = "";
    route();
  }

  // --- the sessions list ----------------------------------------------------------------------

  function leave() {
    if (listTimer !== null) clearInterval(listTimer);
    listTimer = null;
    if (current !== null) {
      current.abort.abort();
      clearInterval(current.timer);
      clearInterval(current.clock);
    }
    current = null;
  }

  async function showList() {
    show("sessions");
    try {
      const { engines } = await api("GET", "/v1/engines");
      const select = $("engine");
      const chosen = select.value;
      select.replaceChildren(...engines.map((e) => el("option", null, e.name)));
      if (chosen) select.value = chosen;
      await refreshList();
    } catch (error) {
      failed(error);
      return;
    }
    listTimer = setInterval(() => refreshList().catch(failed), LIST_EVERY_MS);
  }

  async function refreshList() {
    const { sessions, approvals } = await api("GET", "/v1/sessions");
    sessions.sort((a, b) => b.updated_at - a.updated_at);
    const rows = sessions.map((s) => {
      const waiting = (approvals && approvals[s.session_id]) || 0;
      const row = el("tr");
      row.dataset.sessionId = s.session_id;
      const link = el("a", "mono", s.session_id.slice(0, 8));
      link.href = `#/s/${encodeURIComponent(s.session_id)}`;
      link.title = s.session_id;
      const name = el("td");
      name.append(link);
      const status = el("span", "status", waiting ? WAITING : s.status);
      status.dataset.status = waiting ? "waiting" : s.status;
      if (waiting > 1) status.title = `${waiting} requests wait for a decision`;
      const statusCell = el("td");
      statusCell.append(status);
      const cost = s.last_result ? s.last_result.cost_usd : null;
      row.append(
        name,
        el("td", null, s.engine),
        el("td", null, s.harness),
        statusCell,
        el("td", "num", s.turns),
        el("td", "num", money(cost)),
        el("td", "muted", when(s.updated_at)),
      );
      return row;
    });
    $("session-rows").replaceChildren(...rows);
    $("no-sessions").hidden = sessions.length > 0;
    notice("");
  }

  async function newSession(event) {
    event.preventDefault();
    const engine = $("engine").value;
    if (!engine) return;
    try {
      const made = await api("POST", `/v1/engines/${encodeURIComponent(engine)}/sessions`, {});
      location.hash = `#/s/${encodeURIComponent(made.session_id)}`;
    } catch (error) {
      failed(error);
    }
  }

  // --- one session ----------------------------------------------------------------------------

  function showSession(sid) {
    show("session");
    $("events").replaceChildren();
    $("session-title").textContent = sid;
    $("session-meta").textContent = "";
    setStatus("…");
    current = {
      sid,
      abort: new AbortController(),
      lastId: null, // the id of the last stored event seen: where a reconnect resumes
      tools: new Map(), // tool_use_id -> the element its result goes into
      pending: null, // the assistant message being streamed by delta events
      errors: new Set(), // the error events of the turn being drawn (not repeated under its result)
      approvals: new Map(), // request_id -> its card (approval requests and questions)
      status: "…",
      turn: 0,
      cost: 0,
      record: null,
      timer: null,
    };
    const view = current;
    refreshRecord(view);
    view.timer = setInterval(() => refreshRecord(view), RECORD_EVERY_MS);
    view.clock = setInterval(() => tickApprovals(view), 1000);
    follow(view);
    $("prompt").focus();
  }

  async function refreshRecord(view) {
    try {
      const record = await api("GET", sessionPath(view.sid));
      if (view !== current) return;
      view.record = record;
      drawMeta(view);
    } catch (error) {
      if (view === current) failed(error);
    }
  }

  function drawMeta(view) {
    const r = view.record;
    if (!r) return;
    const turns = `${r.turns} turn${r.turns === 1 ? "" : "s"}`;
    $("session-meta").textContent = `${r.engine} · ${r.harness} · ${turns} · total ${money(view.cost)}`;
    setStatus(r.status);
  }

  function setStatus(status) {
    if (current !== null) current.status = status;
    const waiting = status === "running" && current !== null && waitingCards(current) > 0;
    const badge = $("session-status");
    badge.textContent = waiting ? WAITING : status;
    badge.dataset.status = waiting ? "waiting" : status;
    $("interrupt").disabled = status !== "running";
  }

  // The session's events: everything stored (earlier turns), then live, over one fetch() stream;
  // on a drop, resume after the last event seen (?after=<turn>:<seq>).
  async function follow(view) {
    const { signal } = view.abort;
    while (!signal.aborted) {
      try {
        const after = encodeURIComponent(view.lastId ?? "-1");
        const response = await fetch(sessionPath(view.sid, `/events?after=${after}`), {
          headers: { Authorization: `Bearer ${apiKey}`, Accept: "text/event-stream" },
          cache: "no-store",
          signal,
        });
        if (!response.ok) {
          const body = await response.json().catch(() => null);
          const error = new ApiError(response.status, body?.message ?? `HTTP ${response.status}`);
          failed(error);
          if (response.status === 401 || response.status === 404) return;
        } else {
          if ($("notice").textContent.startsWith(STREAM_LOST)) notice("");
          await readEvents(response.body, (id, event) => {
            if (view !== current) return;
            if (event.type !== "delta" && id) view.lastId = id; // deltas are live only
            draw(view, event);
          });
        }
      } catch (error) {
        if (signal.aborted) return;
        notice(`${STREAM_LOST} (${error.message}); reconnecting…`);
      }
      await sleep(RECONNECT_MS);
    }
  }

  // Server-sent events from a fetch() body: blocks split by a blank line; "id:" and "data:" lines.
  async function readEvents(body, onEvent) {
    const reader = body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += value.replace(/\r\n?/g, "\n");
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        let id = null;
        const data = [];
        for (const line of block.split("\n")) {
          if (line.startsWith("id:")) id = line.slice(3).trim();
          else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
        }
        if (!data.length) continue; // a keep-alive comment
        let event;
        try {
          event = JSON.parse(data.join("\n"));
        } catch {
          continue;
        }
        onEvent(id, event);
      }
    }
  }

  // --- drawing events ---------------------------------------------------------------------------

  function append(view, node) {
    const list = $("events");
    const atEnd = list.scrollHeight - list.scrollTop - list.clientHeight < 40;
    list.append(node);
    if (atEnd) list.scrollTop = list.scrollHeight;
  }

  function bubble(cls, who, text) {
    const box = el("div", `msg ${cls}`);
    box.append(el("div", "who", who));
    const body = el("div", "text", text);
    box.append(body);
    return { box, body };
  }

  function line(cls, text) {
    return el("div", `line ${cls}`, text);
  }

  function toolSummary(input) {
    if (!input || typeof input !== "object") return "";
    for (const key of ["command", "file_path", "path", "pattern", "url", "query"]) {
      if (typeof input[key] === "string") return input[key];
    }
    return JSON.stringify(input);
  }

  function finishPending(view, text) {
    const pending = view.pending;
    view.pending = null;
    if (pending === null) return false;
    if (text !== undefined) pending.body.textContent = text;
    pending.box.classList.remove("streaming");
    return true;
  }

  const DRAW = {
    user(view, e) {
      finishPending(view);
      if (e.turn !== view.turn) {
        view.turn = e.turn;
        append(view, el("div", "turn", `Turn ${e.turn}`));
      }
      append(view, bubble("user", "You", e.text).box);
      setStatus("running");
    },
    delta(view, e) {
      if (view.pending === null || view.pending.messageId !== (e.message_id ?? null)) {
        finishPending(view);
        const made = bubble("assistant streaming", "Agent", "");
        view.pending = { ...made, messageId: e.message_id ?? null };
        append(view, made.box);
      }
      view.pending.body.append(document.createTextNode(e.text));
    },
    message(view, e) {
      if (!finishPending(view, e.text)) append(view, bubble("assistant", "Agent", e.text).box);
    },
    thinking(view, e) {
      const box = el("details", "thinking");
      box.append(el("summary", null, "Thinking"), el("div", "text", e.text));
      append(view, box);
    },
    tool_use(view, e) {
      finishPending(view);
      const box = el("details", "tool");
      box.dataset.toolUseId = e.tool_use_id;
      const summary = el("summary");
      summary.append(el("span", "tool-name", e.name), el("code", "tool-arg", toolSummary(e.input)));
      const input = el("pre", "tool-input", JSON.stringify(e.input ?? {}, null, 2));
      const result = el("pre", "tool-result pending", "running…");
      box.append(summary, input, result);
      view.tools.set(e.tool_use_id, { box, result });
      append(view, box);
    },
    tool_result(view, e) {
      const tool = view.tools.get(e.tool_use_id);
      if (tool === undefined) {
        append(view, el("pre", `tool-result${e.is_error ? " failed" : ""}`, clip(e.content)));
        return;
      }
      tool.result.textContent = clip(e.content);
      tool.result.classList.remove("pending");
      if (e.is_error) {
        tool.result.classList.add("failed");
        tool.box.classList.add("failed");
      }
    },
    error(view, e) {
      view.errors.add(e.message);
      append(view, line("error", `Error: ${e.message}`));
    },
    result(view, e) {
      finishPending(view);
      const r = e.result || {};
      if (typeof r.cost_usd === "number") view.cost += r.cost_usd;
      const parts = [
        `${r.is_error ? "✗" : r.stop_reason === "completed" ? "✓" : "■"} ${r.stop_reason || "completed"}`,
        money(r.cost_usd),
        `${Number(r.duration_s || 0).toFixed(1)} s`,
        `${r.num_turns ?? 0} model turn${r.num_turns === 1 ? "" : "s"}`,
      ];
      const row = line(`result${r.is_error ? " failed" : ""}`, parts.join(" · "));
      row.dataset.stopReason = r.stop_reason || "";
      append(view, row);
      if (r.is_error && r.error && !view.errors.has(r.error)) append(view, line("error", r.error));
      view.errors.clear();
      for (const tool of view.tools.values()) {
        if (tool.result.classList.contains("pending")) tool.result.textContent = "(no result)";
        tool.result.classList.remove("pending");
      }
      for (const [rid, card] of view.approvals) {
        if (card.dataset.state === "pending") settleCard(view, rid, "denied", "✗ The turn ended before a decision");
      }
      setStatus(r.is_error ? "failed" : "idle");
      if (view.record) view.record = { ...view.record, turns: Math.max(view.record.turns, e.turn) };
      drawMeta(view);
      refreshRecord(view);
    },
    approval_request(view, e) {
      finishPending(view);
      const card = approvalCard(view, e, "Approval needed", e.tool);
      const body = card.querySelector(".approval-body");
      if (e.command) {
        body.append(el("pre", "approval-command", clip(e.command)));
      } else if (e.path) {
        body.append(el("div", "approval-path mono", e.path));
        if (e.diff) body.append(diffBlock(e.diff));
      } else {
        body.append(el("pre", "approval-input", clip(JSON.stringify(e.input ?? {}, null, 2))));
      }
      const reason = el("input", "approval-reason");
      reason.type = "text";
      reason.placeholder = "reason (optional, for Deny)";
      reason.setAttribute("aria-label", "reason for denying");
      const allow = el("button", "allow", "Allow");
      allow.type = "button";
      const deny = el("button", "deny danger", "Deny");
      deny.type = "button";
      allow.addEventListener("click", () => decide(view, card, { decision: "allow" }));
      deny.addEventListener("click", () => {
        const why = reason.value.trim();
        decide(view, card, why ? { decision: "deny", reason: why } : { decision: "deny" });
      });
      card.querySelector(".approval-actions").append(reason, allow, deny);
    },
    approval_decision(view, e) {
      const allowed = e.decision === "allow";
      const who = e.by === "timeout" ? "nobody answered in time" : e.key_id ? `key ${e.key_id}` : "a client";
      const text = `${allowed ? "✓ Allowed" : "✗ Denied"} (${who})${e.reason ? `: ${e.reason}` : ""}`;
      settleCard(view, e.request_id, allowed ? "allowed" : "denied", text);
    },
    question(view, e) {
      finishPending(view);
      const card = approvalCard(view, e, "Question", null);
      card.classList.add("question");
      card.querySelector(".approval-body").append(el("div", "question-text", e.question));
      const actions = card.querySelector(".approval-actions");
      for (const option of e.options || []) {
        const pick = el("button", "option", option);
        pick.type = "button";
        pick.addEventListener("click", () => decide(view, card, { answer: option }));
        actions.append(pick);
      }
      const answer = el("input", "answer-text");
      answer.type = "text";
      answer.placeholder = "your answer";
      answer.setAttribute("aria-label", "your answer");
      const send = el("button", "answer", "Answer");
      send.type = "button";
      send.addEventListener("click", () => {
        if (answer.value.trim()) decide(view, card, { answer: answer.value.trim() });
      });
      actions.append(answer, send);
    },
    question_answer(view, e) {
      const who = e.by === "timeout" ? "nobody answered in time" : e.key_id ? `key ${e.key_id}` : "a client";
      const text = e.answer === null || e.answer === undefined ? `✗ Not answered (${who})` : `Answered (${who}): ${e.answer}`;
      settleCard(view, e.request_id, e.answer === null || e.answer === undefined ? "denied" : "allowed", text);
    },
    started(view, e) {
      append(view, line("note", `${e.harness} · ${e.model}${e.harness_version ? ` · ${e.harness_version}` : ""}`));
    },
    setup(view, e) {
      append(view, line("note", `setup: ${e.step}`));
    },
  };

  // --- approvals: a card per waiting tool call or question, decided with its buttons --------------

  function approvalCard(view, e, title, tool) {
    const card = el("div", "approval");
    card.dataset.requestId = e.request_id;
    card.dataset.state = "pending";
    card.dataset.expiresAt = String(e.expires_at);
    const head = el("div", "approval-head");
    head.append(el("span", "approval-title", title));
    if (tool) head.append(el("span", "tool-name", tool));
    const r = view.record;
    const asker = r ? `${r.engine} · ${r.harness}${r.owner ? ` · key ${r.owner}` : ""}` : "";
    head.append(el("span", "approval-who muted", asker ? `asked by ${asker}` : ""));
    head.append(el("span", "approval-expires muted", ""));
    card.append(head, el("div", "approval-body"), el("div", "approval-actions"));
    card.append(el("div", "approval-outcome"));
    view.approvals.set(e.request_id, card);
    append(view, card);
    tickCard(card);
    setStatus(view.status);
    return card;
  }

  function diffBlock(diff) {
    const block = el("pre", "approval-diff");
    for (const text of clip(diff).split("\n")) {
      const cls = text.startsWith("+") ? "add" : text.startsWith("-") ? "del" : text.startsWith("@@") ? "hunk" : null;
      block.append(el("span", cls, `${text}\n`));
    }
    return block;
  }

  function waitingCards(view) {
    let n = 0;
    for (const card of view.approvals.values()) if (card.dataset.state === "pending") n += 1;
    return n;
  }

  function tickCard(card) {
    if (card.dataset.state !== "pending") return;
    const expires = Number(card.dataset.expiresAt);
    const left = Math.round(expires - Date.now() / 1000);
    const at = new Date(expires * 1000).toLocaleTimeString();
    card.querySelector(".approval-expires").textContent =
      left > 0 ? `expires ${at} (in ${left} s)` : `expired ${at}: denied unless already decided`;
  }

  function tickApprovals(view) {
    if (view !== current) return;
    for (const card of view.approvals.values()) tickCard(card);
  }

  function settleCard(view, rid, state, text) {
    const card = view.approvals.get(rid);
    if (card === undefined) {
      append(view, line(`note ${state === "allowed" ? "" : "warn"}`, text));
      return;
    }
    card.dataset.state = state;
    const title = card.querySelector(".approval-title");
    title.textContent = card.classList.contains("question") ? "Question" : "Approval";
    card.querySelector(".approval-actions").replaceChildren();
    card.querySelector(".approval-expires").textContent = "";
    card.querySelector(".approval-outcome").textContent = text;
    setStatus(view.status);
  }

  async function decide(view, card, body) {
    for (const button of card.querySelectorAll(".approval-actions button")) button.disabled = true;
    try {
      const path = sessionPath(view.sid, `/approvals/${encodeURIComponent(card.dataset.requestId)}`);
      await api("POST", path, body);
      notice("");
    } catch (error) {
      for (const button of card.querySelectorAll(".approval-actions button")) button.disabled = false;
      failed(error);
    }
  }

  function draw(view, event) {
    const drawer = DRAW[event.type];
    if (drawer !== undefined) {
      drawer(view, event);
    } else if (typeof event.message === "string") {
      append(view, line("note warn", `${event.type}: ${event.message}`)); // retry, warning, cost_unknown
    } else {
      append(view, line("note", String(event.type)));
    }
  }

  async function sendPrompt(event) {
    event.preventDefault();
    if (current === null) return;
    const box = $("prompt");
    const prompt = box.value.trim();
    if (!prompt) return;
    const send = $("send");
    send.disabled = true;
    try {
      await api("POST", sessionPath(current.sid, "/turns"), { prompt });
      box.value = "";
      setStatus("running");
      notice("");
    } catch (error) {
      failed(error);
    } finally {
      send.disabled = false;
    }
  }

  async function interrupt() {
    if (current === null) return;
    try {
      const answer = await api("POST", sessionPath(current.sid, "/interrupt"));
      if (!answer.interrupted) notice("No turn was running.");
    } catch (error) {
      failed(error);
    }
  }

  // --- routing: #/ the list, #/s/<id> one session ------------------------------------------------

  function route() {
    leave();
    notice("");
    if (!apiKey) {
      signOut("");
      return;
    }
    const match = /^#\/s\/([^/]+)$/.exec(location.hash);
    if (match) showSession(decodeURIComponent(match[1]));
    else showList();
    serverInfo();
  }

  // The signed-in key: server version, key name and scopes, and its spend (of its budget).
  async function serverInfo() {
    if (!apiKey) {
      $("server-info").textContent = "";
      return;
    }
    try {
      const me = await api("GET", "/v1/keys/me");
      const budget = me.budget_usd === null ? "" : ` of $${me.budget_usd}/${me.budget_per}`;
      $("server-info").textContent =
        `v${me.server_version} · ${me.name} (${me.scopes.join(", ")}) · $${me.spent_usd.toFixed(2)}${budget}`;
    } catch {
      $("server-info").textContent = "";
    }
  }

  document.addEventListener("DOMContentLoaded", () => {
    $("login-form").addEventListener("submit", signIn);
    $("new-session").addEventListener("submit", newSession);
    $("prompt-form").addEventListener("submit", sendPrompt);
    $("interrupt").addEventListener("click", interrupt);
    $("logout").addEventListener("click", () => signOut("Signed out."));
    $("prompt").addEventListener("keydown", (e) => {
      if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) $("prompt-form").requestSubmit();
    });
    window.addEventListener("hashchange", route);
    route();
  });
})();
