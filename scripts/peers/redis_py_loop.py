#!/usr/bin/env python3
# The consumer loop of redis-py's documentation: XREADGROUP COUNT 100 (BLOCK 2000), each entry
# handled (here: nothing), then one XACK for the batch. It reads only new entries (">"): what
# it held when it died stays pending for good, never read again. For scripts/measure-pipe.
# Usage: redis_py_loop.py URL STREAM GROUP CONSUMER

import sys

import redis


def main():
    url, stream, group, consumer = sys.argv[1:5]
    r = redis.Redis.from_url(url)
    while True:
        reply = r.xreadgroup(group, consumer, {stream: ">"}, count=100, block=2000)
        for _, messages in reply or []:
            ids = []
            for message_id, fields in messages:
                ids.append(message_id)  # the work would be here
            r.xack(stream, group, *ids)


if __name__ == "__main__":
    main()
