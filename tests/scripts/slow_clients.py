"""Slow clients against a store: COUNT connections from SOURCE_ADDR to HOST:PORT, each sending a
join's first bytes one at a time, 0.2 s apart, and never the rest. A connection the store closes is
made again at once, so the store always has COUNT strangers at its door, until SECONDS have passed or SIGTERM comes.
Prints how many connections it tried, and how many the store ended or refused.

    python3 slow_clients.py HOST PORT SOURCE_ADDR COUNT SECONDS
"""
import selectors
import signal
import socket
import struct
import sys
import time

host, port, source, count, seconds = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
# The start of a join (dist/launch/store_protocol.h) with a 32-character run id, as a rank would send it.
first_bytes = struct.pack("<II", 4 + 4 + 4 + 32 + 4 + 1 + 4 + 1 + 4 + 1, 4) + b"join"
selector = selectors.DefaultSelector()
made = closed = 0
sent = {}  # socket -> bytes of first_bytes sent


def connect():
    global made
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setblocking(False)
    s.bind((source, 0))
    try:
        s.connect((host, port))
    except BlockingIOError:
        pass
    except OSError:
        s.close()
        return
    made += 1
    sent[s] = 0
    selector.register(s, selectors.EVENT_READ)


end = time.monotonic() + seconds


def stop(signum, frame):
    global end
    end = 0


signal.signal(signal.SIGTERM, stop)
next_byte = time.monotonic()
while time.monotonic() < end:
    while len(sent) < count:
        connect()
    for key, _ in selector.select(timeout=0.02):
        s = key.fileobj
        try:
            data = s.recv(4096)
        except OSError:
            data = b""
        if not data:  # the store closed it (or the connection failed): another takes its place
            selector.unregister(s)
            s.close()
            del sent[s]
            closed += 1
    if time.monotonic() >= next_byte:
        next_byte += 0.2
        for s in list(sent):
            if sent[s] < len(first_bytes):
                try:
                    s.send(first_bytes[sent[s]:sent[s] + 1])
                    sent[s] += 1
                except OSError:
                    pass
print(f"{made} connection attempts, {closed} ended by the store or refused")
