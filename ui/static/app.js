// leasehold dashboard: live updates by short polling. The page names what
// to fetch (data-poll on #live, the same page with partial=1) and how often;
// the server renders the fragment, escaped, and this script swaps it in,
// keeping open <details> open. Nothing else runs here: every action is a
// server-rendered confirmation page and a POST form.
(function () {
  'use strict';
  var box = document.getElementById('live');
  if (!box || !box.dataset.poll) {
    return;
  }
  var url = box.dataset.poll;
  var every = Math.max(200, parseInt(box.dataset.pollMs, 10) || 3000);
  var stamp = document.getElementById('live-stamp');
  var busy = false;
  var say = function (text) {
    if (stamp) {
      stamp.textContent = text;
    }
  };
  var tick = function () {
    if (busy || document.hidden) {
      return;
    }
    busy = true;
    fetch(url, { credentials: 'same-origin', headers: { Accept: 'text/html' }, cache: 'no-store' })
      .then(function (res) {
        if (!res.ok) {
          throw new Error('HTTP ' + res.status);
        }
        return res.text();
      })
      .then(function (html) {
        var open = [];
        box.querySelectorAll('details[open][id]').forEach(function (d) { open.push(d.id); });
        box.innerHTML = html;
        open.forEach(function (id) {
          var d = document.getElementById(id);
          if (d) {
            d.open = true;
          }
        });
        box.dataset.updates = String((parseInt(box.dataset.updates, 10) || 0) + 1);
        say('live · refreshed ' + new Date().toLocaleTimeString() + ' (your clock)');
      })
      .catch(function (err) {
        say('live · refresh failed (' + err.message + ')');
      })
      .then(function () {
        busy = false;
      });
  };
  say('live · every ' + every / 1000 + ' s');
  window.setInterval(tick, every);
  document.addEventListener('visibilitychange', function () {
    if (!document.hidden) {
      tick();
    }
  });
})();
