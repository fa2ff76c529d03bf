// node t/js/sse_client.mjs URL [SECONDS] [TYPES]
//
// A live timeline read as a JavaScript application would: the npm
// eventsource package (package.json, installed by make sse-deps), which
// reconnects by itself after the server closed the stream, waiting the
// retry: the server set (3 s before any), and sends the last id it saw as
// Last-Event-ID.  Each thing seen is one JSON line on stdout, written at
// once:
//
//   {"type":"open"}                      each (re)connection
//   {"type":"error","message":...,"code":...,"readyState":N}
//                                        an error; readyState 2 (CLOSED):
//                                        no reconnection (a status other
//                                        than 200, a content type other
//                                        than text/event-stream)
//   {"type":"update","id":"...","data":"...","lastEventId":"..."}
//                                        an event (types: message, update,
//                                        delete, reset, or TYPES, commas)
//
// Exits 0 after SECONDS (10).  As the spec says, a block without a data
// line is no event ("event: reset" alone is not seen, "event: reset" then
// "data:" is); unlike a browser, an event without an id field has
// lastEventId "" (a browser gives the last id seen), while Last-Event-ID on
// reconnection is the last id seen either way.

import { EventSource } from 'eventsource';
import { writeSync } from 'node:fs';

const [url, secondsArg, typesArg] = process.argv.slice(2);
if (!url) {
    process.stderr.write('usage: node sse_client.mjs URL [SECONDS] [TYPES]\n');
    process.exit(2);
}
const seconds = Number(secondsArg ?? 10);
const types = (typesArg ?? 'message,update,delete,reset').split(',');

// synchronous: a line is in the file the moment it is seen, and none is
// lost at exit
function out(obj) {
    writeSync(1, JSON.stringify(obj) + '\n');
}

const es = new EventSource(url);

es.addEventListener('open', () => out({ type: 'open' }));

es.addEventListener('error', (e) => {
    out({
        type: 'error',
        message: e.message ?? null,
        code: e.code ?? null,
        readyState: es.readyState,
    });
});

for (const t of types) {
    es.addEventListener(t, (e) => {
        out({ type: e.type, id: e.lastEventId, data: e.data,
              lastEventId: e.lastEventId });
    });
}

setTimeout(() => {
    es.close();
    process.exit(0);
}, seconds * 1000);

for (const sig of ['SIGTERM', 'SIGINT']) {
    process.on(sig, () => {
        es.close();
        process.exit(0);
    });
}
