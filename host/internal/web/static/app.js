// agenthost settings: a live JSON check for JSON editors, the step of a
// Connect that goes on to the provider's sign-in page, and Copy buttons
// beside the set-up snippets of "Connect your agent". The pages work
// without it; the server checks every value again on save, and the
// Connect page's link can be clicked.
"use strict";
document.addEventListener("DOMContentLoaded", function () {
  // A link, not a form's redirect: the settings page's form-action
  // ('self') does not govern it.
  var follow = document.querySelector("a[data-follow]");
  if (follow) { window.location.assign(follow.href); return; }
  // Times in the browser's time zone; the page says UTC without script.
  var local = new Intl.DateTimeFormat(undefined, { dateStyle: "medium", timeStyle: "short" });
  document.querySelectorAll("time[datetime]").forEach(function (t) {
    var d = new Date(t.getAttribute("datetime"));
    if (isNaN(d)) return;
    t.title = t.textContent;
    t.textContent = local.format(d);
  });
  // Copy buttons: without script the snippet is plain text in a <pre>.
  document.querySelectorAll("pre[data-copy]").forEach(function (pre) {
    var b = document.createElement("button");
    b.type = "button";
    b.className = "secondary copy";
    b.textContent = "Copy";
    b.setAttribute("aria-label", "Copy " + (pre.id || "the snippet"));
    b.addEventListener("click", function () {
      var done = function () { b.textContent = "Copied"; };
      if (navigator.clipboard && window.isSecureContext) {
        navigator.clipboard.writeText(pre.textContent).then(done, function () { b.textContent = "Select and copy by hand"; });
        return;
      }
      var range = document.createRange();
      range.selectNodeContents(pre);
      var sel = window.getSelection();
      sel.removeAllRanges();
      sel.addRange(range);
      b.textContent = document.execCommand && document.execCommand("copy") ? "Copied" : "Selected: press Ctrl+C";
    });
    pre.insertAdjacentElement("afterend", b);
  });
  document.querySelectorAll('textarea[data-syntax="json"]').forEach(function (ta) {
    var out = document.getElementById(ta.id + "-live");
    if (!out) return;
    var check = function () {
      var text = ta.value.trim();
      if (text === "") { out.hidden = true; return; }
      try {
        JSON.parse(text);
        out.textContent = "Valid JSON (the schema is checked when you save).";
        out.className = "json-live good";
      } catch (e) {
        out.textContent = "Not valid JSON yet: " + e.message;
        out.className = "json-live bad";
      }
      out.hidden = false;
    };
    var timer = null;
    ta.addEventListener("input", function () { clearTimeout(timer); timer = setTimeout(check, 300); });
  });
});
