// The mcpmux console's one script: the overview's upstream table follows the daemon live over
// server-sent events (GET /console/events), and the audit page's records table adds what is
// recorded from now on (GET /console/audit/tail). Without it every page still works; it only
// saves a reload.
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

// The most rows the live tail keeps on the page.
const TAIL_ROWS = 500;

function tail(table) {
  const body = table.tBodies[0];
  const status = document.getElementById('tail-status');
  let added = 0;
  const source = new EventSource(table.dataset.tail);
  source.addEventListener('records', (event) => {
    const rows = JSON.parse(event.data);
    // They come oldest first: each goes on top of the one before.
    for (const row of rows) {
      const tr = document.createElement('tr');
      const th = document.createElement('th');
      th.scope = 'row';
      const link = document.createElement('a');
      link.href = row.href;
      link.textContent = `Record ${row.seq}`;
      th.append(link);
      tr.append(th);
      for (const text of row.cells) {
        const td = document.createElement('td');
        td.textContent = text;
        tr.append(td);
      }
      body.prepend(tr);
    }
    while (body.rows.length > TAIL_ROWS) {
      body.deleteRow(-1);
    }
    added += rows.length;
    if (status) {
      status.textContent = `${added} new record${added === 1 ? '' : 's'} since the page opened (newest on top).`;
    }
  });
}

document.addEventListener('DOMContentLoaded', () => {
  const live = document.querySelector('table[data-live]');
  if (live) {
    follow(live);
  }
  const records = document.querySelector('table[data-tail]');
  if (records) {
    tail(records);
  }
});
