package io.dspark.vllm.request;

import org.apache.flink.shaded.netty4.io.netty.bootstrap.Bootstrap;
import org.apache.flink.shaded.netty4.io.netty.buffer.ByteBuf;
import org.apache.flink.shaded.netty4.io.netty.buffer.Unpooled;
import org.apache.flink.shaded.netty4.io.netty.channel.Channel;
import org.apache.flink.shaded.netty4.io.netty.channel.ChannelFutureListener;
import org.apache.flink.shaded.netty4.io.netty.channel.ChannelHandlerContext;
import org.apache.flink.shaded.netty4.io.netty.channel.ChannelInboundHandlerAdapter;
import org.apache.flink.shaded.netty4.io.netty.channel.ChannelInitializer;
import org.apache.flink.shaded.netty4.io.netty.channel.ChannelOption;
import org.apache.flink.shaded.netty4.io.netty.channel.EventLoop;
import org.apache.flink.shaded.netty4.io.netty.channel.nio.NioEventLoopGroup;
import org.apache.flink.shaded.netty4.io.netty.channel.socket.SocketChannel;
import org.apache.flink.shaded.netty4.io.netty.channel.socket.nio.NioSocketChannel;
import org.apache.flink.shaded.netty4.io.netty.handler.codec.DecoderResultProvider;
import org.apache.flink.shaded.netty4.io.netty.handler.codec.PrematureChannelClosureException;
import org.apache.flink.shaded.netty4.io.netty.handler.codec.http.DefaultFullHttpRequest;
import org.apache.flink.shaded.netty4.io.netty.handler.codec.http.DefaultHttpHeaders;
import org.apache.flink.shaded.netty4.io.netty.handler.codec.http.HttpRequestEncoder;
import org.apache.flink.shaded.netty4.io.netty.handler.codec.http.HttpContent;
import org.apache.flink.shaded.netty4.io.netty.handler.codec.http.HttpHeaders;
import org.apache.flink.shaded.netty4.io.netty.handler.codec.http.HttpMessage;
import org.apache.flink.shaded.netty4.io.netty.handler.codec.http.HttpMethod;
import org.apache.flink.shaded.netty4.io.netty.handler.codec.http.HttpResponse;
import org.apache.flink.shaded.netty4.io.netty.handler.codec.http.HttpResponseDecoder;
import org.apache.flink.shaded.netty4.io.netty.handler.codec.http.HttpUtil;
import org.apache.flink.shaded.netty4.io.netty.handler.codec.http.HttpVersion;
import org.apache.flink.shaded.netty4.io.netty.handler.codec.http.LastHttpContent;
import org.apache.flink.shaded.netty4.io.netty.handler.ssl.SslHandler;
import org.apache.flink.shaded.netty4.io.netty.util.ReferenceCountUtil;
import org.apache.flink.shaded.netty4.io.netty.util.concurrent.DefaultThreadFactory;
import org.apache.flink.shaded.netty4.io.netty.util.concurrent.Future;

import java.io.IOException;
import java.net.ProtocolException;
import java.net.URI;
import java.util.ArrayDeque;
import java.util.Arrays;
import java.util.HashMap;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLEngine;
import javax.net.ssl.SSLParameters;

/**
 * HTTP/1.1 exchanges over kept-alive connections: the one class of the request step that touches the network
 * (discovery's few requests from the command line go through connector.server.transport, on aiohttp). It
 * runs on the Netty that every Flink 2.x distribution carries inside flink-dist
 * ({@code org.apache.flink.shaded.netty4}), so the connector adds no dependency.
 *
 * <p>Why not the JDK's {@code java.net.http.HttpClient}: against the simulator at zero latency it cost 146-285
 * us of CPU per request (its exchanges hop between the selector thread, the executor and the common
 * ForkJoinPool through several CompletableFuture stages), this transport 55-80 us (docs/benchmarks.md, "The
 * request step").
 *
 * <p>One event-loop thread runs every connection, every attempt's timeout and every completion: an exchange's
 * state is touched on that thread only, and {@link Done} is called there (what it does must not block). Idle
 * connections wait in a pool per origin, the most recently used first; one idle longer than
 * {@link #IDLE_REUSE_NS} is closed rather than reused (servers close theirs after a few seconds: uvicorn, which
 * vLLM runs on, after 5, and a request sent as the server closes would fail). Bodies are copied out of Netty's
 * buffers as they arrive, so the direct memory it uses stays that of its read buffers, whatever the body's size.
 * A host name is resolved (the JDK's resolver, with its cache) when a connection opens, on the event loop: a
 * resolver that hangs holds this instance's requests for that long, as it would hold any connect.
 */
final class Transport implements AutoCloseable {
    /** A connection idle for longer is closed rather than reused. */
    static final long IDLE_REUSE_NS = TimeUnit.SECONDS.toNanos(4);
    /** Header names the transport sets itself (as the JDK's HttpClient restricts them). */
    static final Set<String> RESTRICTED = Set.of("connection", "content-length", "expect", "host", "upgrade");
    private static final long MAX_ARRAY = Integer.MAX_VALUE - 16;

    /** What an exchange ended with: a whole response, or a failure (then {@code headStatus}: the head that came). */
    interface Done {
        void done(Response response, Throwable failure, Integer headStatus);
    }

    /** A whole response. */
    static final class Response {
        final int status;
        final HttpHeaders headers;
        final byte[] body;

        Response(int status, HttpHeaders headers, byte[] body) {
            this.status = status;
            this.headers = headers;
            this.body = body;
        }

        String header(String name) {
            return headers.get(name);
        }
    }

    /** The attempt's own deadline passed (the caller words it). */
    static final class TimedOut extends IOException {
        private static final long serialVersionUID = 1L;

        TimedOut() {
            super("timed out");
        }
    }

    /** The exchange was cancelled by its caller. */
    static final class Cancelled extends IOException {
        private static final long serialVersionUID = 1L;

        Cancelled() {
            super("cancelled");
        }
    }

    private final NioEventLoopGroup group;
    private final EventLoop loop;
    private final SSLContext tls;
    private final boolean verifyHostname;
    private final long maxBodyLimit;
    private final Bootstrap bootstrap;
    private final Map<String, ArrayDeque<Idle>> idle = new HashMap<>(); // on the loop only
    private volatile boolean closed;

    /**
     * @param tls the context for https origins (null: only http ones can be reached)
     * @param verifyHostname check the server's name against its certificate ('request.tls-verify')
     */
    Transport(String threadName, SSLContext tls, boolean verifyHostname, double connectTimeoutS, long maxBodyLimit) {
        this.group = new NioEventLoopGroup(1, new DefaultThreadFactory(threadName, true));
        this.loop = group.next();
        this.tls = tls;
        this.verifyHostname = verifyHostname;
        this.maxBodyLimit = maxBodyLimit;
        this.bootstrap = new Bootstrap()
                .group(group)
                .channel(NioSocketChannel.class)
                .option(ChannelOption.TCP_NODELAY, true)
                .option(ChannelOption.SO_KEEPALIVE, true)
                .option(ChannelOption.CONNECT_TIMEOUT_MILLIS, (int) Math.max(1, Math.min(Integer.MAX_VALUE,
                        connectTimeoutS * 1000)));
    }

    /** The event loop: an executor for work that must not run under a caller's lock (never blocks). */
    EventLoop loop() {
        return loop;
    }

    /**
     * Starts one exchange: {@code method} on {@code uri} with {@code headers} (validated by the caller; host and
     * content-length are set here) and {@code body}; at most {@code limit} bytes of body are read (more fails
     * with {@link Failure.TooLarge}); the whole exchange, connecting included, within {@code timeoutNs} (else
     * {@link TimedOut}). {@code done} is called once, on the event loop.
     */
    Exchange send(URI uri, HttpMethod method, HttpHeaders headers, byte[] body, long limit, long timeoutNs,
            Done done) {
        return send(uri, null, method, headers, body, limit, timeoutNs, done);
    }

    /**
     * As above, connecting to {@code address} (one of the addresses the URI's host name resolves to: a replica)
     * rather than to whatever the name resolves to first; the host header and TLS still name the URI's host, and
     * the connections to that address are pooled apart from the others. A null address: the URI's host.
     */
    Exchange send(URI uri, java.net.InetAddress address, HttpMethod method, HttpHeaders headers, byte[] body,
            long limit, long timeoutNs, Done done) {
        Exchange x = new Exchange(uri, address, method, headers, body,
                Math.min(Math.min(limit, maxBodyLimit), MAX_ARRAY), timeoutNs, done);
        if (closed) {
            done.done(null, new Cancelled(), null);
            return x;
        }
        try {
            loop.execute(x::start);
        } catch (java.util.concurrent.RejectedExecutionException e) { // closed meanwhile
            done.done(null, new Cancelled(), null);
        }
        return x;
    }

    /** Closes every connection and stops the thread; exchanges under way end as {@link Cancelled}. */
    @Override
    public void close() {
        closed = true;
        group.shutdownGracefully(0, 2, TimeUnit.SECONDS);
    }

    private static String origin(URI uri) {
        return uri.getScheme().toLowerCase(Locale.ROOT) + "://" + uri.getHost() + ":" + port(uri);
    }

    /** The port of an http(s) URI, its scheme's default where it names none. */
    static int port(URI uri) {
        return uri.getPort() >= 0 ? uri.getPort() : "https".equalsIgnoreCase(uri.getScheme()) ? 443 : 80;
    }

    private static final class Idle {
        final Channel channel;
        final long sinceNs;

        Idle(Channel channel, long sinceNs) {
            this.channel = channel;
            this.sinceNs = sinceNs;
        }
    }

    private Channel takeIdle(String origin) {
        ArrayDeque<Idle> q = idle.get(origin);
        long now = System.nanoTime();
        while (q != null && !q.isEmpty()) {
            Idle i = q.pollLast();
            if (i.channel.isActive() && now - i.sinceNs < IDLE_REUSE_NS) {
                return i.channel;
            }
            i.channel.close();
        }
        return null;
    }

    private void putIdle(String origin, Channel channel) {
        if (closed) {
            channel.close();
            return;
        }
        idle.computeIfAbsent(origin, k -> new ArrayDeque<>()).addLast(new Idle(channel, System.nanoTime()));
    }

    private void dropIdle(String origin, Channel channel) {
        ArrayDeque<Idle> q = idle.get(origin);
        if (q != null) {
            q.removeIf(i -> i.channel == channel);
        }
    }

    /**
     * The body as its {@code Content-Encoding} says (none is asked for, but a server may compress anyway, and the
     * aiohttp decodes it too): gzip and deflate are inflated up to {@code limit} bytes (more is
     * {@link Failure.TooLarge}: a bomb stops there), another encoding or a body that does not inflate is
     * {@link Failure.Undecodable}.
     */
    static byte[] decoded(String encoding, byte[] body, long limit) throws IOException {
        String e = encoding == null ? "" : encoding.strip().toLowerCase(Locale.ROOT);
        if (e.isEmpty() || e.equals("identity")) {
            return body;
        }
        if (!(e.equals("gzip") || e.equals("x-gzip") || e.equals("deflate"))) {
            throw new Failure.Undecodable("the content-encoding '" + Text.codePoints(encoding.strip(), 40)
                    + "' cannot be decoded");
        }
        if (body.length == 0) {
            return body;
        }
        try {
            // "deflate" is zlib-wrapped; some servers send it raw (as aiohttp, both are read)
            boolean zlib = body.length >= 2 && (body[0] & 0x0f) == 8
                    && (((body[0] & 0xff) << 8) | (body[1] & 0xff)) % 31 == 0;
            return inflate(body, e.equals("deflate") ? zlib ? Wrap.ZLIB : Wrap.RAW : Wrap.GZIP, limit);
        } catch (java.util.zip.ZipException | java.io.EOFException x) {
            throw new Failure.Undecodable("the body does not decode as its content-encoding (" + e + ") says: "
                    + Failure.detail(x));
        }
    }

    private enum Wrap { GZIP, ZLIB, RAW }

    private static byte[] inflate(byte[] body, Wrap wrap, long limit) throws IOException {
        java.util.zip.Inflater inflater = wrap == Wrap.GZIP ? null : new java.util.zip.Inflater(wrap == Wrap.RAW);
        try (java.io.InputStream in = inflater == null
                ? new java.util.zip.GZIPInputStream(new java.io.ByteArrayInputStream(body), 8192)
                : new java.util.zip.InflaterInputStream(new java.io.ByteArrayInputStream(body), inflater, 8192)) {
            // grown as the output comes, never past the limit (nor allocated for the worst case up front)
            byte[] out = new byte[(int) Math.min(Math.min(limit, 4L * body.length + 64), 1 << 20)];
            int size = 0;
            while (true) {
                if (size == out.length) {
                    int one = in.read();
                    if (one < 0) { // full exactly at its end: nothing more comes
                        break;
                    }
                    if (size >= limit) {
                        throw new Failure.TooLarge("the body passed the limit of " + Text.thousands(limit)
                                + " bytes as it was decoded (" + wrap.name().toLowerCase(Locale.ROOT) + ")");
                    }
                    out = Arrays.copyOf(out, (int) Math.min(limit, 2L * out.length));
                    out[size++] = (byte) one;
                    continue;
                }
                int n = in.read(out, size, out.length - size);
                if (n < 0) {
                    break;
                }
                size += n;
            }
            return size == out.length ? out : Arrays.copyOf(out, size);
        } catch (java.util.zip.ZipException x) {
            throw x;
        } catch (IOException x) {
            if (x instanceof Failure.TooLarge) {
                throw x;
            }
            // InflaterInputStream reports a bad stream as ZipException, a cut one as EOFException
            throw new java.util.zip.ZipException(Failure.detail(x));
        } finally {
            if (inflater != null) {
                inflater.end(); // (InflaterInputStream ends only an inflater of its own)
            }
        }
    }

    /** One request and its response, on one connection. */
    final class Exchange {
        private final URI uri;
        private final java.net.InetAddress address;
        private final String origin;
        private final HttpMethod method;
        private final HttpHeaders headers;
        private final byte[] requestBody;
        private final long limit;
        private final long timeoutNs;
        private final Done done;
        // On the loop only, from here on.
        private boolean ended;
        private Channel channel;
        private Future<?> timer;
        private HttpResponse head;
        private boolean interim;
        private byte[] buffer;
        private int size;
        private long announced = -1;

        Exchange(URI uri, java.net.InetAddress address, HttpMethod method, HttpHeaders headers, byte[] body,
                long limit, long timeoutNs, Done done) {
            this.uri = uri;
            this.address = address;
            this.origin = address == null ? origin(uri) : origin(uri) + "@" + address.getHostAddress();
            this.method = method;
            this.headers = headers;
            this.requestBody = body;
            this.limit = limit;
            this.timeoutNs = timeoutNs;
            this.done = done;
        }

        /** Ends it now as {@link Cancelled} (its connection is closed); nothing if it has ended. */
        void cancel() {
            try {
                loop.execute(() -> fail(new Cancelled()));
            } catch (java.util.concurrent.RejectedExecutionException e) {
                // the transport is closed: the exchange ended there
            }
        }

        private void start() {
            if (ended) {
                return;
            }
            if (closed) {
                fail(new Cancelled());
                return;
            }
            timer = loop.schedule(() -> fail(new TimedOut()), timeoutNs, TimeUnit.NANOSECONDS);
            Channel reused = takeIdle(origin);
            if (reused != null) {
                write(reused);
                return;
            }
            boolean https = "https".equalsIgnoreCase(uri.getScheme());
            Bootstrap b = bootstrap.clone().handler(new ChannelInitializer<SocketChannel>() {
                @Override
                protected void initChannel(SocketChannel ch) {
                    if (https) {
                        ch.pipeline().addLast("tls", sslHandler());
                    }
                    Connection connection = new Connection(origin);
                    ch.pipeline().addLast("http-out", new HttpRequestEncoder());
                    ch.pipeline().addLast("http", new Decoder(connection));
                    ch.pipeline().addLast("exchange", connection);
                }
            });
            org.apache.flink.shaded.netty4.io.netty.channel.ChannelFuture connecting = address == null
                    ? b.connect(uri.getHost(), port(uri)) : b.connect(new java.net.InetSocketAddress(address, port(uri)));
            connecting.addListener((ChannelFutureListener) f -> {
                if (!f.isSuccess()) {
                    fail(f.cause());
                } else if (ended) {
                    putIdle(origin, f.channel()); // a good new connection, for the next exchange
                } else {
                    write(f.channel());
                }
            });
        }

        private SslHandler sslHandler() {
            if (tls == null) {
                throw new IllegalStateException("no TLS context for " + origin);
            }
            SSLEngine engine = tls.createSSLEngine(uri.getHost(), port(uri));
            engine.setUseClientMode(true);
            if (verifyHostname) {
                SSLParameters p = engine.getSSLParameters();
                p.setEndpointIdentificationAlgorithm("HTTPS");
                engine.setSSLParameters(p);
            }
            return new SslHandler(engine);
        }

        private void write(Channel ch) {
            channel = ch;
            ((Connection) ch.pipeline().get("exchange")).current = this;
            String target = uri.getRawPath() == null || uri.getRawPath().isEmpty() ? "/" : uri.getRawPath();
            if (uri.getRawQuery() != null) {
                target += "?" + uri.getRawQuery();
            }
            HttpHeaders h = new DefaultHttpHeaders(false);
            h.set("host", uri.getPort() >= 0 ? uri.getHost() + ":" + uri.getPort() : uri.getHost());
            h.add(headers);
            if (requestBody.length > 0 || method.equals(HttpMethod.POST)) {
                h.set("content-length", requestBody.length);
            }
            ByteBuf content = requestBody.length == 0 ? Unpooled.EMPTY_BUFFER : Unpooled.wrappedBuffer(requestBody);
            DefaultFullHttpRequest request = new DefaultFullHttpRequest(
                    HttpVersion.HTTP_1_1, method, target, content, h, new DefaultHttpHeaders(false));
            ch.writeAndFlush(request).addListener((ChannelFutureListener) f -> {
                if (!f.isSuccess() && channel == f.channel()) {
                    fail(f.cause());
                }
            });
        }

        // --- what the connection reads, for this exchange ------------------------------------

        void onHead(HttpResponse response) {
            int status = response.status().code();
            if (status < 100 || status > 999) { // (as llhttp: three digits)
                fail(new ProtocolException("the status code " + status + " is not one of three digits"));
                return;
            }
            Channel ch = channel;
            if (ch != null && ((Decoder) ch.pipeline().get("http")).bothLengths == response) {
                fail(new ProtocolException("a response with both Content-Length and Transfer-Encoding: chunked"));
                return;
            }
            if (status >= 100 && status < 200 && status != 101) {
                interim = true; // an informational answer (100, 102, 103): the real one follows
                return;
            }
            if (status == 101) {
                fail(new ProtocolException("the server switched protocols (101), which was not asked for"));
                return;
            }
            head = response;
            announced = HttpUtil.getContentLength(response, -1L);
            if (announced > limit) {
                fail(new Failure.TooLarge("the server announced " + Text.thousands(announced)
                        + " bytes, more than the limit of " + Text.thousands(limit)));
                return;
            }
            buffer = new byte[(int) Math.max(0, Math.min(announced >= 0 ? announced : 8192, 1 << 20))];
        }

        void onContent(ByteBuf content) {
            int n = content.readableBytes();
            if (n == 0 || interim || head == null) {
                return;
            }
            if ((long) size + n > limit) {
                fail(new Failure.TooLarge(
                        "the body passed the limit of " + Text.thousands(limit) + " bytes; the rest was not read"));
                return;
            }
            if (size + n > buffer.length) {
                buffer = Arrays.copyOf(buffer, (int) Math.min(limit, Math.max((long) size + n, 2L * buffer.length)));
            }
            content.readBytes(buffer, size, n);
            size += n;
        }

        void onLast() {
            if (interim) {
                interim = false;
                return;
            }
            if (head == null || ended) {
                return;
            }
            byte[] body = size == buffer.length ? buffer : Arrays.copyOf(buffer, size);
            try {
                body = decoded(head.headers().get("content-encoding"), body, limit);
            } catch (IOException e) {
                fail(e);
                return;
            }
            ended = true;
            timer.cancel(false);
            Channel ch = channel;
            ((Connection) ch.pipeline().get("exchange")).current = null;
            channel = null;
            // Bytes after the response (past its Content-Length, a body after a 204 or 304) are not the start of
            // the next one: on a kept connection they would be read as the next request's answer.
            boolean leftover = ((Decoder) ch.pipeline().get("http")).leftover();
            if (HttpUtil.isKeepAlive(head) && !closed && !leftover) {
                putIdle(origin, ch);
            } else {
                ch.close();
            }
            done.done(new Response(head.status().code(), head.headers(), body), null, null);
        }

        void onClosed() {
            String bytes = announced >= 0 ? Text.thousands(size) + " of " + Text.thousands(announced) + " bytes"
                    : Text.thousands(size) + " bytes";
            fail(new IOException(head == null ? "end of stream before the response's head"
                    : "end of stream after " + bytes));
        }

        /** Ends the exchange with {@code cause} (once), closing its connection. */
        void fail(Throwable cause) {
            if (ended) {
                return;
            }
            ended = true;
            if (timer != null) {
                timer.cancel(false);
            }
            Channel ch = channel;
            channel = null;
            if (ch != null) {
                ((Connection) ch.pipeline().get("exchange")).current = null;
                ch.close();
            }
            done.done(null, cause, head == null ? null : head.status().code());
        }
    }

    /**
     * The response decoder of a connection; bytes that come while no exchange is on it (not a whole response,
     * which {@link Connection} sees: a part of one, or garbage) close it rather than wait there for the next
     * exchange's answer to be appended to them.
     */
    private static final class Decoder extends HttpResponseDecoder {
        private final Connection connection;

        Decoder(Connection connection) {
            super(4096, 65536, 65536);
            this.connection = connection;
        }

        /** Bytes read and not decoded yet (called as a message is handed on: what follows it in this read). */
        boolean leftover() {
            return actualReadableBytes() > 0;
        }

        /** The last head that had both a Content-Length and chunked coding. */
        HttpMessage bothLengths;

        /**
         * A response with both a Content-Length and chunked coding (RFC 9112 6.1: it may be an attempt at
         * response splitting, and llhttp refuses it): Netty would drop the length and read the chunks;
         * the head is noted, and the exchange fails on it.
         */
        @Override
        protected void handleTransferEncodingChunkedWithContentLength(HttpMessage message) {
            super.handleTransferEncodingChunkedWithContentLength(message);
            bothLengths = message;
        }

        @Override
        public void channelRead(ChannelHandlerContext ctx, Object msg) throws Exception {
            if (connection.current == null && msg instanceof ByteBuf && ((ByteBuf) msg).isReadable()) {
                ReferenceCountUtil.release(msg);
                connection.forget(ctx);
                ctx.close();
                return;
            }
            super.channelRead(ctx, msg);
        }
    }

    /** The last handler of a connection: hands what it reads to the exchange on it, if any. */
    private final class Connection extends ChannelInboundHandlerAdapter {
        private final String origin;
        Exchange current;

        Connection(String origin) {
            this.origin = origin;
        }

        void forget(ChannelHandlerContext ctx) {
            Transport.this.dropIdle(origin, ctx.channel());
        }

        @Override
        public void channelRead(ChannelHandlerContext ctx, Object msg) {
            try {
                Exchange x = current;
                if (x == null) { // nothing asked: a server that talks out of turn is not reused
                    dropIdle(origin, ctx.channel());
                    ctx.close();
                    return;
                }
                if (msg instanceof DecoderResultProvider && ((DecoderResultProvider) msg).decoderResult().isFailure()) {
                    Throwable why = ((DecoderResultProvider) msg).decoderResult().cause();
                    if (why instanceof PrematureChannelClosureException) {
                        x.onClosed(); // the body was cut: what came is counted there
                    } else {
                        x.fail(new ProtocolException(Failure.detail(why)));
                    }
                    return;
                }
                if (msg instanceof HttpResponse) {
                    x.onHead((HttpResponse) msg);
                }
                if (msg instanceof HttpContent && current == x) {
                    x.onContent(((HttpContent) msg).content());
                }
                if (msg instanceof LastHttpContent && current == x) {
                    x.onLast();
                }
            } finally {
                ReferenceCountUtil.release(msg);
            }
        }

        @Override
        public void channelInactive(ChannelHandlerContext ctx) {
            dropIdle(origin, ctx.channel());
            Exchange x = current;
            if (x != null) {
                SslHandler ssl = ctx.pipeline().get(SslHandler.class);
                if (ssl != null && ssl.handshakeFuture().isDone() && !ssl.handshakeFuture().isSuccess()) {
                    x.fail(ssl.handshakeFuture().cause());
                } else {
                    x.onClosed();
                }
            }
            ctx.fireChannelInactive();
        }

        @Override
        public void exceptionCaught(ChannelHandlerContext ctx, Throwable cause) {
            Exchange x = current;
            if (x != null) {
                x.fail(cause);
            } else {
                dropIdle(origin, ctx.channel());
                ctx.close();
            }
        }
    }
}
