"""A forward HTTP proxy for the remote-upstream proxy test: `CONNECT host:port` tunnels and
absolute-form requests (`GET http://host:port/path`), every target sent to 127.0.0.1 whatever its
host name, so a test can name upstreams by host names that resolve nowhere. Prints `listening
PORT` once ready, then one line per request: `CONNECT host:port` or `METHOD URL`."""

import asyncio
from urllib.parse import urlsplit


async def pipe(reader, writer):
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        writer.close()


async def serve(client_reader, client_writer):
    head = await client_reader.readuntil(b"\r\n\r\n")
    request_line, _, rest = head.partition(b"\r\n")
    method, target, version = request_line.decode().split(" ", 2)
    print(f"{method} {target}", flush=True)
    if method == "CONNECT":
        port = int(target.rsplit(":", 1)[1])
        preamble = None
    else:
        url = urlsplit(target)
        port = url.port or 80
        path = url.path or "/"
        if url.query:
            path += "?" + url.query
        preamble = f"{method} {path} {version}\r\n".encode() + rest
    try:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        client_writer.write(b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\n\r\n")
        client_writer.close()
        return
    if preamble is None:
        client_writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
    else:
        up_writer.write(preamble)
    await asyncio.gather(pipe(client_reader, up_writer), pipe(up_reader, client_writer))


async def main():
    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    print(f"listening {server.sockets[0].getsockname()[1]}", flush=True)
    async with server:
        await server.serve_forever()


asyncio.run(main())
