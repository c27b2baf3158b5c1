"""moto's S3 server (`moto_server`, same arguments) answering one request at a time, for the
catalog's conformance tests (tests/it/s3.rs).

moto checks `If-None-Match: *` and then writes, in two steps, so on its threaded server two PUTs
of one key at the same moment can both succeed; S3 makes the check and the write one step. The
catalog's racing committers then lost a commit on moto (log entry 14 of 15, CI on 4cfaa4f), a
fault of the test server and not of the catalog. One request at a time makes moto's check and
write atomic, as S3's are."""

import sys

import moto.server

serve = moto.server.run_simple


def serial(*args, **kwargs):
    kwargs["threaded"] = False
    serve(*args, **kwargs)


moto.server.run_simple = serial
moto.server.main(sys.argv[1:])
