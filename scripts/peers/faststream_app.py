#!/usr/bin/env python3
# A FastStream Redis Streams subscriber that only acks: the default subscriber (one message at a
# time), or with BATCH=1 the batch subscriber (StreamSub(batch=True, max_records=100)). FastStream
# acks each message (each batch) once its handler returns. For scripts/measure-pipe.
# Usage: [BATCH=1] faststream_app.py URL STREAM GROUP CONSUMER

import asyncio
import os
import sys

from faststream import FastStream
from faststream.redis import RedisBroker, StreamSub

url, stream, group, consumer = sys.argv[1:5]
broker = RedisBroker(url)
app = FastStream(broker)

if os.environ.get("BATCH"):

    @broker.subscriber(stream=StreamSub(stream, group=group, consumer=consumer, batch=True, max_records=100))
    async def handle_batch(body: list):
        pass  # the work would be here

else:

    @broker.subscriber(stream=StreamSub(stream, group=group, consumer=consumer))
    async def handle(body):
        pass  # the work would be here


if __name__ == "__main__":
    asyncio.run(app.run())
