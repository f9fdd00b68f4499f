"""The bench report's recording player: a small asciicast v2 player written here, and each trial's recording beside
its transcript (recording.cast, and recording.js: the same text as a script, which a page opened from a file may
load where it may not fetch a file).

The player understands what oc_repl/render/cast.py writes: text, CR and LF, clear and home, and colours (SGR); any
other escape sequence is skipped. It keeps the recording's times (divided by the speed chosen) and says when it is
done (`data-state="ended"` on the player).
"""

from __future__ import annotations

import json
from pathlib import Path

from oc_repl.private import write_atomic
from oc_repl.render.cast import cast_text, read

CAST, CAST_SCRIPT = "recording.cast", "recording.js"
SCRIPT_HEAD = "(window.ocCasts = window.ocCasts || {})[document.currentScript.src] = "

PLAYER_CSS = """
#player { position: sticky; top: 0; background: #fff; border: 1px solid #999; padding: 6px; margin: 1em 0; }
#player[hidden] { display: none; }
.player-bar { font-size: 90%; margin-bottom: 4px; }
.screen { background: #1e1e1e; color: #ddd; font-family: 'DejaVu Sans Mono', Menlo, consolas, monospace;
          font-size: 12px; line-height: 1.2; padding: 6px; margin: 0; overflow: auto; max-height: 70vh; }
.s1 { font-weight: bold; } .s2 { opacity: .6; } .s31 { color: #f66; } .s32 { color: #6d6; } .s33 { color: #dd6; }
.s34 { color: #69f; } .s35 { color: #d6d; } .s36 { color: #6dd; } .s37 { color: #fff; }
.play { cursor: pointer; border: 0; background: none; padding: 0 2px; font-size: 85%; }
"""

PLAYER_HTML = """<div id="player" hidden data-state="idle"><div class="player-bar">
<button id="player-toggle" type="button">pause</button> <button id="player-end" type="button">end</button>
<select id="player-speed"><option value="1">1×</option><option value="2">2×</option><option value="4">4×</option>
<option value="16">16×</option></select> <span id="player-time"></span> · <span id="player-title"></span>
<button id="player-close" type="button">close</button></div><pre id="player-screen" class="screen"></pre></div>"""

PLAYER_JS = r"""
(function () {
  const casts = (window.ocCasts = window.ocCasts || {});
  const $ = (id) => document.getElementById(id);
  const CSI = /^\x1b\[([0-9;]*)([A-Za-z])/;
  class Screen {
    constructor(w, h) { this.w = w; this.h = h; this.style = ""; this.clear(); }
    clear() { this.rows = []; for (let i = 0; i < this.h; i++) this.rows.push([]); this.r = 0; this.c = 0; }
    newline() {
      this.r++; this.c = 0;
      if (this.r >= this.h) { this.rows.shift(); this.rows.push([]); this.r = this.h - 1; }
    }
    put(ch) { if (this.c >= this.w) this.newline(); this.rows[this.r][this.c++] = [ch, this.style]; }
    write(s) {
      for (let i = 0; i < s.length; ) {
        const ch = s[i];
        if (ch === "\x1b") {
          const m = CSI.exec(s.slice(i, i + 32));
          if (m) { this.csi(m[1], m[2]); i += m[0].length; } else i++;
          continue;
        }
        if (ch === "\r") this.c = 0; else if (ch === "\n") this.newline(); else this.put(ch);
        i++;
      }
    }
    csi(args, cmd) {
      if (cmd === "H") { this.r = 0; this.c = 0; }
      else if (cmd === "J" && args === "2") this.clear();
      else if (cmd === "m") {
        for (const code of (args || "0").split(";").map(Number)) {
          this.style = code === 0 ? "" : this.style + " s" + code;
        }
      }
    }
    text() {
      const line = (row) => Array.from(row, (c) => (c ? c[0] : " ")).join("").trimEnd();
      return this.rows.map(line).join("\n").trimEnd();
    }
    render(pre) {
      pre.textContent = "";
      this.rows.forEach((row, n) => {
        let run = "", style = null;
        const flush = () => {
          if (!run) return;
          const span = document.createElement("span");
          if (style) span.className = style.trim();
          span.textContent = run; pre.appendChild(span); run = "";
        };
        for (const cell of Array.from(row, (c) => c || [" ", ""])) {
          if (cell[1] !== style) { flush(); style = cell[1]; }
          run += cell[0];
        }
        flush();
        if (n < this.rows.length - 1) pre.appendChild(document.createTextNode("\n"));
      });
    }
  }
  let timer = null, state = null;
  function parse(text) {
    const lines = text.split("\n").filter((l) => l.trim());
    const events = lines.slice(1).map((l) => JSON.parse(l)).filter((e) => e[1] === "o");
    return { header: JSON.parse(lines[0]), events };
  }
  function speed() { return Number($("player-speed").value) || 1; }
  function show() {
    state.screen.render($("player-screen"));
    const total = state.events.length ? state.events[state.events.length - 1][0] : 0;
    const at = state.next ? state.events[state.next - 1][0] : 0;
    $("player-time").textContent = at.toFixed(1) + " / " + total.toFixed(1) + " s";
  }
  function step() {
    timer = null;
    const e = state.events[state.next];
    if (!e) { $("player").dataset.state = "ended"; $("player-toggle").textContent = "replay"; show(); return; }
    state.screen.write(e[2]); state.next++;
    const after = state.events[state.next];
    show();
    if (!after) { step(); return; }
    timer = setTimeout(step, Math.max(0, (after[0] - e[0]) * 1000 / speed()));
  }
  function start(id) {
    const rec = parse(casts[id]);
    if (timer) clearTimeout(timer);
    state = { id, events: rec.events, next: 0, screen: new Screen(rec.header.width || 80, rec.header.height || 24) };
    $("player").hidden = false; $("player").dataset.state = "playing"; $("player").dataset.recording = id;
    $("player-title").textContent = rec.header.title || id; $("player-toggle").textContent = "pause";
    step();
  }
  // a recording's script files it under its own address, so two runs' trials of the same name stay apart
  window.ocPlay = function (src) {
    const id = new URL(src, document.baseURI).href;
    if (casts[id]) return start(id);
    const script = document.createElement("script");
    script.src = src; script.onload = () => start(id);
    document.head.appendChild(script);
  };
  window.ocScreenText = () => (state ? state.screen.text() : "");
  document.addEventListener("DOMContentLoaded", () => {
    $("player-toggle").onclick = () => {
      if (!state) return;
      if ($("player").dataset.state === "ended") return start(state.id);
      const paused = Boolean(timer);
      if (timer) clearTimeout(timer);
      timer = null;
      $("player").dataset.state = paused ? "paused" : "playing";
      $("player-toggle").textContent = paused ? "play" : "pause";
      if (!paused) step();
    };
    $("player-end").onclick = () => {
      if (!state) return;
      if (timer) clearTimeout(timer);
      while (state.next < state.events.length) state.screen.write(state.events[state.next++][2]);
      step();
    };
    $("player-close").onclick = () => { if (timer) clearTimeout(timer); timer = null; $("player").hidden = true; };
    document.querySelectorAll("button.play[data-src]").forEach((button) => {
      button.onclick = () => window.ocPlay(button.dataset.src);
    });
  });
})();
"""


def write_recording(transcript: Path, directory: Path) -> Path:
    """recording.cast and recording.js in `directory`, made from the transcript when missing or older (or written
    in an older form); the script files the recording under the script's own address."""
    cast, script = directory / CAST, directory / CAST_SCRIPT
    fresh = all(
        p.is_file() and not p.is_symlink() and p.stat().st_mtime >= transcript.stat().st_mtime for p in (cast, script)
    )
    if not fresh or not _begins(script, SCRIPT_HEAD.encode()):
        text = cast_text(read(transcript))
        write_atomic(cast, text)
        write_atomic(script, f"{SCRIPT_HEAD}{json.dumps(text)};\n")
    return cast


def _begins(path: Path, head: bytes) -> bool:
    with path.open("rb") as f:
        return f.read(len(head)) == head
