// The mcpmux console's one script: the overview's upstream table follows the daemon live over
// server-sent events (GET /console/events). Without it every page still works; it only saves a
// reload.
'use strict';

function follow(table) {
  const source = new EventSource(table.dataset.live);
  source.addEventListener('upstreams', (event) => {
    for (const row of JSON.parse(event.data)) {
      const line = Array.from(table.querySelectorAll('tbody tr'))
        .find((tr) => tr.dataset.upstream === row.name);
      if (!line) {
        continue;
      }
      line.dataset.state = row.state;
      for (const cell of line.querySelectorAll('td[data-field]')) {
        const value = row[cell.dataset.field];
        if (value !== undefined && cell.textContent !== value) {
          cell.textContent = value;
        }
      }
    }
  });
}

document.addEventListener('DOMContentLoaded', () => {
  const table = document.querySelector('table[data-live]');
  if (table) {
    follow(table);
  }
});
