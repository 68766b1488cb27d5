"""A TCP proxy that damages a byte stream: put it between the host and a QEMU twin's UART socket
to see the serial link survive corrupted, dropped and duplicated bytes.

Each direction has its own seeded RNG, its own fault rates and its own counters. Every byte read
from one side gets at most one fault: corrupted (xor a random nonzero byte), dropped, or sent
twice; the rest pass unchanged. A direction can also be blacked out (every byte dropped) to make
a request fail on purpose.
"""

from __future__ import annotations

import random
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

TO_DEVICE, TO_HOST = "to_device", "to_host"
RECV_BYTES = 4096  # bytes per read; the faults are decided byte by byte anyway
JOIN_TIMEOUT = 5.0  # seconds to wait for a pump thread after its sockets are closed
# Direction -> offset of its RNG seed, so the two directions draw independent streams.
SEED_OFFSET = {TO_DEVICE: 0, TO_HOST: 1}


@dataclass(frozen=True)
class FaultRates:
    """Probability per byte of each fault; they are exclusive, so they add up."""
    corrupt: float = 0.0
    drop: float = 0.0
    duplicate: float = 0.0

    @property
    def total(self) -> float:
        return self.corrupt + self.drop + self.duplicate


CLEAN = FaultRates()


@dataclass
class DirectionCounts:
    passed: int = 0  # bytes read from the sending side (before any fault)
    corrupted: int = 0
    dropped: int = 0
    duplicated: int = 0
    blacked_out: int = 0  # bytes dropped by blackout(), not by the random faults

    @property
    def faults(self) -> int:
        return self.corrupted + self.dropped + self.duplicated

    @property
    def fault_rate(self) -> float:
        """Random faults per byte, counting only bytes that were not blacked out."""
        n = self.passed - self.blacked_out
        return self.faults / n if n else 0.0


@dataclass
class _Direction:
    name: str
    rates: FaultRates
    rng: random.Random
    counts: DirectionCounts = field(default_factory=DirectionCounts)
    blackout: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    def damage(self, data: bytes) -> bytes:
        out = bytearray()
        with self.lock:  # rates and blackout may change between two reads, not within one
            c, r, rng = self.counts, self.rates, self.rng
            c.passed += len(data)
            if self.blackout:
                c.blacked_out += len(data)
                return b""
            if r.total == 0:
                return data
            for b in data:
                u = rng.random()
                if u < r.corrupt:
                    out.append(b ^ rng.randrange(1, 256))
                    c.corrupted += 1
                elif u < r.corrupt + r.drop:
                    c.dropped += 1
                elif u < r.total:
                    out += bytes((b, b))
                    c.duplicated += 1
                else:
                    out.append(b)
        return bytes(out)


def _low_latency(s: socket.socket) -> None:
    """Send at once and ACK at once: QEMU writes the UART byte by byte, and Nagle's algorithm on
    its side waiting for our delayed ACK would otherwise add ~40 ms to every reply."""
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    _quickack(s)


def _quickack(s: socket.socket) -> None:
    if hasattr(socket, "TCP_QUICKACK"):  # Linux only; the kernel clears it again, so re-arm
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 1)


class FaultyLink:
    """Listens on 127.0.0.1:`port` for one client (the host) and forwards to `target_port`
    (the twin's UART), damaging bytes in each direction at its own rates."""

    def __init__(self, target_port: int, to_device: FaultRates = CLEAN,
                 to_host: FaultRates = CLEAN, seed: int = 0, host: str = "127.0.0.1") -> None:
        self.directions = {
            TO_DEVICE: _Direction(TO_DEVICE, to_device, random.Random(2 * seed)),
            TO_HOST: _Direction(TO_HOST, to_host, random.Random(2 * seed + 1)),
        }
        self._upstream = socket.create_connection((host, target_port))
        _low_latency(self._upstream)
        self._listener = socket.socket()
        self._listener.bind((host, 0))
        self._listener.listen(1)
        self.port: int = self._listener.getsockname()[1]
        self._client: socket.socket | None = None
        self._closed = False
        self._lock = threading.Lock()  # guards _client, _closed and _threads
        self._threads = [threading.Thread(target=self._serve, name="faulty-link", daemon=True)]
        self._threads[0].start()

    @property
    def url(self) -> str:
        return f"socket://127.0.0.1:{self.port}"

    def counts(self, direction: str) -> DirectionCounts:
        d = self.directions[direction]
        with d.lock:
            return DirectionCounts(**vars(d.counts))

    def set_rates(self, to_device: FaultRates | None = None,
                  to_host: FaultRates | None = None) -> None:
        for name, rates in ((TO_DEVICE, to_device), (TO_HOST, to_host)):
            if rates is not None:
                with self.directions[name].lock:
                    self.directions[name].rates = rates

    @contextmanager
    def blackout(self, direction: str) -> Iterator[None]:
        """Drop every byte in one direction while inside the block."""
        d = self.directions[direction]
        with d.lock:
            d.blackout = True
        try:
            yield
        finally:
            with d.lock:
                d.blackout = False

    def _serve(self) -> None:
        try:
            client, _ = self._listener.accept()
        except OSError:  # closed before anyone connected
            return
        _low_latency(client)
        pumps = [threading.Thread(target=self._pump, args=(client, self._upstream, TO_DEVICE),
                                  name="faulty-link-to-device", daemon=True),
                 threading.Thread(target=self._pump, args=(self._upstream, client, TO_HOST),
                                  name="faulty-link-to-host", daemon=True)]
        with self._lock:
            if self._closed:
                client.close()
                return
            self._client = client
            self._threads += pumps
            for t in pumps:
                t.start()

    def _pump(self, src: socket.socket, dst: socket.socket, direction: str) -> None:
        d = self.directions[direction]
        try:
            while True:
                data = src.recv(RECV_BYTES)
                if not data:
                    break
                _quickack(src)
                out = d.damage(data)
                if out:
                    dst.sendall(out)
        except OSError:  # the other pump or close() shut the sockets
            pass
        finally:
            try:
                dst.shutdown(socket.SHUT_WR)
            except OSError:
                pass

    def close(self) -> None:
        with self._lock:
            self._closed = True
            sockets = [s for s in (self._listener, self._client, self._upstream) if s]
            threads = list(self._threads)
        for s in sockets:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()
        for t in threads:
            if t is not threading.current_thread():
                t.join(JOIN_TIMEOUT)

    def __enter__(self) -> FaultyLink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
