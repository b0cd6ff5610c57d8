#!/usr/bin/env python3
"""Puts each `perf script -F ip,sym` sample (with call chains) in one bucket
and prints the share of each, and µs per request when given the server's
CPU µs per request (argv[1]). A kernel sample goes to the first bucket,
in the order below, that any frame of its chain matches: the TCP/IP and
loopback work (which includes waking the peer) first, so what is left under
io_uring, epoll and the syscall layer is what each server's own way of
driving sockets costs on top of it."""
import re
import sys

BUCKETS = [
    ("TCP/IP + loopback (incl. waking the peer)", re.compile(
        r"^(__)?(tcp|ip|ipv4|inet|sk|sock|skb|kfree_skb|consume_skb|dev|netif|"
        r"net_rx|napi|process_backlog|loopback|lock_sock|release_sock|alloc_skb|"
        r"sk_stream|netdev|validate_xmit|nf|dst|raw_local_deliver|"
        r"do_softirq|handle_softirqs|local_bh_enable)")),
    ("scheduler: sleep and wake-up", re.compile(
        r"^(__)?(schedule|try_to_wake_up|ttwu|finish_task_switch|pick_next|"
        r"psi_|enqueue_|dequeue_|update_curr|hrtimer|tick_|switch_mm|"
        r"__switch_to|do_nanosleep)")),
    ("io_uring", re.compile(r"^(__)?(io_|x64_sys_io_uring|do_sys_io_uring)")),
    ("epoll", re.compile(r"^(__)?(ep_|do_epoll|x64_sys_epoll|do_sys_epoll)")),
    ("syscall layer (entry/exit, fd lookup, read/write)", re.compile(
        r"^(entry_SYSCALL|do_syscall_64|syscall_|__x64_sys_|ksys_|vfs_|"
        r"__fget|fget|fput|__fdget|fdget|rw_verify|security_)")),
]
USER, OTHER = "user space", "other kernel"


def samples(lines):
    frames = []
    for line in lines:
        line = line.strip()
        if not line:
            if frames:
                yield frames
            frames = []
            continue
        ip, _, sym = line.partition(" ")
        sym = sym.split("+")[0].strip()
        frames.append((int(ip, 16) if re.fullmatch(r"[0-9a-f]+", ip) else 0, sym))
    if frames:
        yield frames


def bucket(frames):
    if frames[0][0] < 0xFFFF800000000000:
        return USER
    for name, pattern in BUCKETS:
        if any(pattern.match(sym) for _, sym in frames):
            return name
    return OTHER


def main():
    us = float(sys.argv[1]) if len(sys.argv) > 1 else 0.0
    counts = {}
    for frames in samples(sys.stdin):
        name = bucket(frames)
        counts[name] = counts.get(name, 0) + 1
    total = sum(counts.values()) or 1
    print(f"{total} samples")
    order = [USER] + [n for n, _ in BUCKETS] + [OTHER]
    for name in order:
        share = counts.get(name, 0) / total
        print(f"  {name:52} {100 * share:5.1f}%  {share * us:5.2f} µs/request")


main()
