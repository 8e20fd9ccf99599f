"""A userspace link between two TUN devices that delays and drops IP packets: netem's delay and
loss for a kernel built without sch_netem (this project's CI VM has none, nor tc classifiers or
nftables). The kernel still does all of TCP: a dropped packet is retransmitted, a delayed one
delays the round trip, exactly as on a lossy or distant network.

    python3 tun-shaper.py INSIDE OUTSIDE

creates the TUN devices INSIDE (the test moves it into the service's namespace) and OUTSIDE (the
host's side), prints `ready`, then forwards every packet from one to the other. Packets from
INSIDE (towards the store) wait DELAY_MS and are dropped with probability TO_STORE; packets from
OUTSIDE (the store's answers) are dropped with probability FROM_STORE. Each line
`TO_STORE FROM_STORE DELAY_MS` on stdin sets all three and is answered `ok` once in force. The devices
exist while this process holds them: it exits when stdin closes (the test ended or died), and
the kernel deletes both. Writing to a device that is down fails; the packet is lost, as on a
cable that is unplugged.
"""
import fcntl
import heapq
import os
import random
import select
import struct
import sys
import time

TUNSETIFF = 0x400454CA
IFF_TUN = 0x0001
IFF_NO_PI = 0x1000


def open_tun(name: str) -> int:
    fd = os.open('/dev/net/tun', os.O_RDWR)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack('16sH', name.encode(), IFF_TUN | IFF_NO_PI))
    os.set_blocking(fd, False)
    return fd


def send(fd: int, packet: bytes) -> None:
    try:
        os.write(fd, packet)
    except OSError:
        pass  # the device is down (EIO) or its queue is full: the packet is lost


def main() -> None:
    inside = open_tun(sys.argv[1])
    outside = open_tun(sys.argv[2])
    print('ready', flush=True)
    loss = {inside: 0.0, outside: 0.0}
    delay = 0.0
    queue: list[tuple[float, int, int, bytes]] = []  # (due, arrival number, device, packet)
    arrivals = 0
    while True:
        timeout = max(0.0, queue[0][0] - time.monotonic()) if queue else None
        readable, _, _ = select.select([inside, outside, sys.stdin], [], [], timeout)
        for source in readable:
            if source is sys.stdin:
                line = sys.stdin.readline()
                if not line:
                    return
                to_store, from_store, delay_ms = (float(word) for word in line.split())
                loss = {inside: to_store, outside: from_store}
                delay = delay_ms / 1000
                print('ok', flush=True)
                continue
            target = outside if source == inside else inside
            hold = delay if source == inside else 0.0
            while True:
                try:
                    packet = os.read(source, 65536)
                except BlockingIOError:
                    break
                if loss[source] > 0 and random.random() < loss[source]:
                    continue
                if hold == 0 and not queue:
                    send(target, packet)
                else:
                    arrivals += 1
                    heapq.heappush(queue, (time.monotonic() + hold, arrivals, target, packet))
        now = time.monotonic()
        while queue and queue[0][0] <= now:
            _, _, target, packet = heapq.heappop(queue)
            send(target, packet)


if __name__ == '__main__':
    main()
