// Front end of attn_core.widgets.AnswerBox (an anywidget ES module: no imports, no build step, no network).
//
// The reader types an answer; the page grades it here, with no kernel, so the box works in the static
// book as in JupyterLab and Colab. This is the one grader: Python only builds the question's spec
// (attn_core/widgets/answer.py). In a live kernel the text and its grade are also sent to Python
// (the `answer` and `verdict` traits). The block between the grader markers is pure;
// tests/test_answer.py runs it in Node.js over a table of inputs and the verdicts they must get.

// <grader>
const SLIP_REL = 1e-9;
const RIGHT_REL = 1e-12;
const BYTES = { b: 1, byte: 1, bytes: 1 };
const FLOPS = { flop: 1, flops: 1 };
["k", "m", "g", "t", "p"].forEach((p, i) => {
  BYTES[p + "b"] = 1000 ** (i + 1);
  BYTES[p + "ib"] = 1024 ** (i + 1);
  FLOPS[p + "flop"] = 1000 ** (i + 1);
  FLOPS[p + "flops"] = 1000 ** (i + 1);
});
const SUFFIX = { k: 1, K: 1, M: 2, G: 3, T: 4, P: 5 };
const FUNCS = ["ln", "log", "log2", "log10", "sqrt", "exp"];
const NUMBER = "[0-9]{1,3}(?:,[0-9]{3})+(?:\\.[0-9]*)?(?:[eE][+-]?[0-9]+)?|[0-9]+(?:\\.[0-9]*)?(?:[eE][+-]?[0-9]+)?|\\.[0-9]+(?:[eE][+-]?[0-9]+)?";
const TOKEN = new RegExp(`[ \\t\\n\\r]*(?:(${NUMBER})|(log2|log10|[A-Za-z]+)|([-+*/^()%]))`, "y");
const EXAMPLES = {
  bytes: "2.4 GiB, 26.6 GB or 2^30 B",
  FLOPs: "7.3e9, 640 GFLOPs or 4*8192^2*2048",
  none: "18432, 18,432, 1.2e9, 43% or ln 9",
  count: "18432, 18,432 or 1.2e9",
};
const PHRASE = { bytes: "a number of bytes", FLOPs: "a number of FLOPs", none: "a plain number" };
// [ratio typed / expected, what that slip says, the most rel_tol it may use], in this order
const FACTORS = [
  [2.0, "Twice the answer: is something counted twice?", Infinity],
  [0.5, "Half the answer: is a factor 2 missing?", Infinity],
  [1.024, "Off by the ratio of 1024 to 1000: 4096 (a 4K context) where 4000 was meant?", 0.002],
  [1 / 1.024, "Off by the ratio of 1000 to 1024: 4000 where 4096 (a 4K context) was meant?", 0.002],
];
for (let k = 1; k < 5; k++) FACTORS.push([1000.0 ** k, `A factor 10^${3 * k} too high: check the unit prefix (K, M, G, T).`, Infinity]);
for (let k = 1; k < 5; k++) FACTORS.push([1000.0 ** -k, `A factor 10^${3 * k} too low: check the unit prefix (K, M, G, T).`, Infinity]);
for (let k = 1; k < 5; k++) FACTORS.push([1024.0 ** k, `A factor 2^${10 * k} too high: check the unit prefix (KiB, MiB, GiB).`, Infinity]);
for (let k = 1; k < 5; k++) FACTORS.push([1024.0 ** -k, `A factor 2^${10 * k} too low: check the unit prefix (KiB, MiB, GiB).`, Infinity]);

class AnswerParseError extends Error {}

function strip(text) {
  return text.replace(/^[ \t\n\r]+|[ \t\n\r]+$/g, "");
}

function normalize(text) {
  let t = strip(String(text));
  for (const [a, b] of [["\u2212", "-"], ["\u2013", "-"], ["\u00d7", " x "], ["\u22c5", "*"], ["\u00b7", "*"],
    ["**", "^"], ["\u00a0", " "], ["\u202f", " "], ["\u2009", " "]]) t = t.split(a).join(b);
  return t;
}

function tokens(text) {
  const out = [];
  text = strip(text);
  TOKEN.lastIndex = 0;
  let pos = 0;
  while (pos < text.length) {
    TOKEN.lastIndex = pos;
    const m = TOKEN.exec(text);
    if (!m || TOKEN.lastIndex === pos) throw new AnswerParseError("cannot read");
    if (m[1] !== undefined) out.push(["num", m[1]]);
    else if (m[2] !== undefined) out.push(["id", m[2]]);
    else out.push(["op", m[3]]);
    pos = TOKEN.lastIndex;
  }
  return out;
}

function unitKind(unit) {
  if (unit === null || unit === undefined) return "none";
  if (unit === "bytes" || unit === "FLOPs") return unit;
  return "count";
}

function countWords(unit) {
  const w = unit.toLowerCase();
  return w.endsWith("s") ? [w, w.slice(0, -1)] : [w, w + "s"];
}

const has = (obj, key) => Object.prototype.hasOwnProperty.call(obj, key);
const isTok = (t, kind, val) => t !== undefined && t[0] === kind && t[1] === val;

function parseAnswer(text, unit) {
  const toks = tokens(normalize(text));
  let kind = null, scale = 1.0, base = null, prefixed = false, power = 0;
  const last = toks[toks.length - 1];
  if (isTok(last, "op", "%")) {
    toks.pop();
    kind = "percent";
    scale = 0.01;
  } else if (last !== undefined && last[0] === "id") {
    const low = last[1].toLowerCase();
    if (has(BYTES, low)) {
      kind = "bytes";
      scale = BYTES[low];
      prefixed = low.length > 1 && low !== "byte" && low !== "bytes";
      base = prefixed ? (low.includes("ib") ? "binary" : "decimal") : null;
      power = prefixed ? "kmgtp".indexOf(low[0]) + 1 : 0;
    } else if (has(FLOPS, low)) {
      kind = "FLOPs";
      scale = FLOPS[low];
      prefixed = low !== "flop" && low !== "flops";
    } else if (low === "x") {
      kind = "ratio";
    } else if (unitKind(unit) === "count" && countWords(unit).includes(low)) {
      kind = "count";
    }
    if (kind !== null) toks.pop();
  }
  let suffix = 0;
  const end = toks[toks.length - 1];
  if (!prefixed && end !== undefined && end[0] === "id" && has(SUFFIX, end[1]) && kind !== "percent") {
    suffix = SUFFIX[toks.pop()[1]];
  }
  if (toks.length === 0) throw new AnswerParseError("no number");
  const value = new Parser(toks).parse();
  let values;
  if (suffix) {
    if (unitKind(unit) === "count" && countWords(unit).includes("token")) {
      values = [value * 1024.0 ** suffix * scale, value * 1000.0 ** suffix * scale];
    } else {
      values = [value * 1000.0 ** suffix * scale];
    }
  } else {
    values = [value * scale];
  }
  if (!values.every(Number.isFinite)) throw new AnswerParseError("not a finite number");
  return { values, kind, bare: kind === null, base, power };
}

function finite(x) {
  if (!Number.isFinite(x)) throw new AnswerParseError("not a finite number");
  return x;
}

class Parser {
  constructor(toks) {
    this.toks = toks;
    this.i = 0;
  }
  peek() {
    return this.toks[this.i];
  }
  take() {
    return this.toks[this.i++] || [null, null];
  }
  parse() {
    const v = this.expr();
    if (this.i !== this.toks.length) throw new AnswerParseError("unexpected");
    return v;
  }
  expr() {
    let v = this.term();
    while (isTok(this.peek(), "op", "+") || isTok(this.peek(), "op", "-")) {
      const op = this.take()[1];
      const w = this.term();
      v = op === "+" ? v + w : v - w;
    }
    return v;
  }
  term() {
    let v = this.unary();
    while (isTok(this.peek(), "op", "*") || isTok(this.peek(), "op", "/") || isTok(this.peek(), "id", "x")) {
      const op = this.take()[1];
      const w = this.unary();
      if (op === "/") {
        if (w === 0) throw new AnswerParseError("division by zero");
        v = v / w;
      } else {
        v = v * w;
      }
    }
    return v;
  }
  unary() {
    if (isTok(this.peek(), "op", "-")) {
      this.take();
      return -this.unary();
    }
    if (isTok(this.peek(), "op", "+")) {
      this.take();
      return this.unary();
    }
    return this.power();
  }
  power() {
    let v = this.primary();
    if (isTok(this.peek(), "op", "^")) {
      this.take();
      const w = this.unary();
      v = finite(Math.pow(v, w));
    }
    return v;
  }
  primary() {
    const [kind, tok] = this.take();
    if (kind === "num") return finite(Number(tok.split(",").join("")));
    if (kind === "op" && tok === "(") {
      const v = this.expr();
      if (!isTok(this.take(), "op", ")")) throw new AnswerParseError("missing )");
      return v;
    }
    if (kind === "id" && FUNCS.includes(tok)) {
      const a = this.power();
      if (tok === "sqrt") return finite(Math.sqrt(a));
      if (tok === "exp") return finite(Math.exp(a));
      if (a <= 0) throw new AnswerParseError("logarithm of a number that is not positive");
      return finite({ ln: Math.log, log: Math.log, log2: Math.log2, log10: Math.log10 }[tok](a));
    }
    throw new AnswerParseError("unexpected");
  }
}

function tenths(x) {
  const t = Math.floor(x * 10 + 0.5);
  return `${Math.floor(t / 10)}.${t % 10}`;
}

function near(v, target, tol) {
  return Math.abs(v - target) <= tol;
}

function verdict(status, message, spec, value = null) {
  const hint = ["right", "empty", "invalid"].includes(status) ? "" : (spec.hint || "");
  return { status, message, hint, value };
}

function gradeAnswer(spec, text) {
  const e = Number(spec.expected);
  const unit = spec.unit;
  const ukind = unitKind(unit);
  const rel = Number(spec.rel_tol), absTol = Number(spec.abs_tol), close = Number(spec.close_tol);
  if (!strip(normalize(text))) return verdict("empty", "Type an answer, then press Enter.", spec);
  let p;
  try {
    p = parseAnswer(text, unit);
  } catch (err) {
    if (!(err instanceof AnswerParseError)) throw err;
    return verdict("invalid", `Not a number I can read: try e.g. ${EXAMPLES[ukind]}.`, spec);
  }
  const k = p.kind;
  const allowed = { bytes: ["bytes"], FLOPs: ["FLOPs"], none: ["percent", "ratio"], count: ["count"] }[ukind];
  if (k !== null && !allowed.includes(k)) {
    const phrase = PHRASE[ukind] || `a number of ${unit}`;
    return verdict("unit", `The unit does not fit: the answer is ${phrase}.`, spec);
  }
  const values = p.values;
  const rightTol = Math.max(rel * Math.abs(e), absTol, RIGHT_REL * Math.abs(e));
  for (const x of values) {
    if (near(x, e, rightTol)) {
      const textE = spec.expected_text || "";
      return verdict("right", textE ? `Right: ${textE}.` : "Right.", spec, x);
    }
  }
  let v = values[0];
  for (const x of values) if (Math.abs(x - e) < Math.abs(v - e)) v = x;
  for (const [t, message] of spec.slips || []) {
    const target = Number(t);
    if (values.some((x) => near(x, target, Math.max(rel * Math.abs(target), absTol, SLIP_REL * Math.abs(target))))) {
      return verdict("slip", message, spec, v);
    }
  }
  if (ukind === "bytes" && p.base !== null) {
    const n = p.power;
    const alt = values.map((x) => x * (p.base === "binary" ? 1.024 ** -n : 1.024 ** n));
    if (alt.some((x) => near(x, e, Math.max(rightTol, SLIP_REL * Math.abs(e))))) {
      return verdict("slip", "Right digits, wrong unit: GB, MB... are powers of 1000 (1 GB = 10^9 bytes); " +
        "GiB, MiB... powers of 1024 (1 GiB = 2^30 bytes).", spec, v);
    }
  }
  if ((ukind === "bytes" || ukind === "FLOPs") && p.bare) {
    const scales = [];
    for (let n = 1; n < 6; n++) scales.push(1000.0 ** n);
    if (ukind === "bytes") for (let n = 1; n < 6; n++) scales.push(1024.0 ** n);
    if (scales.some((s) => near(v * s, e, Math.max(rightTol, SLIP_REL * Math.abs(e))))) {
      return verdict("unit", `Add the unit: a bare number is read as ${unit}.`, spec, v);
    }
  }
  if (e !== 0 && v / e > 0) {
    const r = v / e;
    for (const [factor, message, cap] of FACTORS) {
      if (near(r, factor, Math.max(Math.min(rel, cap) * factor, SLIP_REL * factor))) return verdict("slip", message, spec, v);
    }
  }
  if (e !== 0) {
    const diff = Math.abs(v - e);
    const way = v > e ? "high" : "low";
    if (diff <= close * Math.abs(e)) {
      if (spec.exact && Number.isInteger(v) && Number.isInteger(e)) {
        return verdict("close", `Close: ${Math.trunc(diff)} too ${way}.`, spec, v);
      }
      const pct = (100 * diff) / Math.abs(e);
      const amount = pct < 0.05 ? "under 0.1%" : `${tenths(pct)}%`;
      return verdict("close", `Close: ${amount} ${way}.`, spec, v);
    }
    const r = v / e;
    if (v === 0) return verdict("wrong", "Not quite: the answer is not zero.", spec, v);
    if (r < 0) return verdict("wrong", "Not quite: the sign is wrong.", spec, v);
    if (r >= 0.5 && r <= 2) return verdict("wrong", `Not quite: ${tenths((100 * diff) / Math.abs(e))}% too ${way}.`, spec, v);
    const times = r > 2 ? r : 1 / r;
    if (times >= 1e6) return verdict("wrong", `Not quite: over a million times too ${way}.`, spec, v);
    const amount = times < 100 ? tenths(times) : String(Math.floor(times + 0.5));
    return verdict("wrong", `Not quite: about ${amount} times too ${way}.`, spec, v);
  }
  return verdict("wrong", "Not quite.", spec, v);
}
// </grader>

const MARKS = { right: "\u2713", close: "\u2248", slip: "!", unit: "!", wrong: "\u2717", invalid: "?", empty: "" };

function render({ model, el }) {
  const spec = model.get("spec") || {};
  const uid = "al-answer-" + Math.random().toString(36).slice(2, 10);
  const root = document.createElement("div");
  root.className = "exercise-check al-answer";
  // keys typed in the box are the box's: JupyterLab must not take them as notebook shortcuts
  root.addEventListener("keydown", (event) => event.stopPropagation());

  const label = document.createElement("label");
  label.htmlFor = `${uid}-input`;
  label.textContent = spec.label || "Your answer";
  const row = document.createElement("div");
  row.className = "al-answer-row";
  const input = document.createElement("input");
  input.type = "text";
  input.id = `${uid}-input`;
  input.autocomplete = "off";
  input.spellcheck = false;
  input.placeholder = spec.placeholder || "";
  input.setAttribute("aria-describedby", `${uid}-status`);
  const button = document.createElement("button");
  button.type = "button";
  button.textContent = "Check";
  row.append(input, button);

  const status = document.createElement("div");
  status.id = `${uid}-status`;
  status.className = "al-answer-status";
  status.setAttribute("role", "status");
  status.setAttribute("aria-live", "polite");
  const mark = document.createElement("span");
  mark.className = "al-answer-mark";
  mark.setAttribute("aria-hidden", "true");
  const message = document.createElement("span");
  message.className = "al-answer-message";
  const hint = document.createElement("div");
  hint.className = "al-answer-hint";
  status.append(mark, message, hint);
  root.append(label, row, status);
  el.appendChild(root);

  const submit = () => {
    const v = gradeAnswer(spec, input.value);
    status.dataset.verdict = v.status;
    root.dataset.verdict = v.status;
    mark.textContent = MARKS[v.status] || "";
    message.textContent = v.message;
    hint.textContent = v.hint ? `Hint: ${v.hint}` : "";
    input.setAttribute("aria-invalid", v.status === "right" || v.status === "empty" ? "false" : "true");
    model.set("answer", input.value);
    model.set("verdict", v);
    model.save_changes();
  };
  input.addEventListener("keydown", (event) => {
    if (event.key === "Enter") {
      event.preventDefault();
      submit();
    }
  });
  button.addEventListener("click", submit);
  return () => {};
}

export default { render };
