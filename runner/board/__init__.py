"""The board (`runner board`): a local web app on a clone that shows what needs a person, the
plan and its graph, each step's result, runs and live log, and the workers; and lets the
person running it approve, reject, retry, abort, halt and resume through the same queue
calls as the CLI. It reads the queue as a worker does (fetch, snapshot) and never runs a
step's command. Its web libraries are imported only by `runner board`."""
