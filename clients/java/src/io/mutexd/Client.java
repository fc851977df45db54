package io.mutexd;

import java.io.IOException;
import java.io.InputStream;
import java.net.ConnectException;
import java.net.InetAddress;
import java.net.ProxySelector;
import java.net.URI;
import java.net.URISyntaxException;
import java.net.http.HttpClient;
import java.net.http.HttpConnectTimeoutException;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.net.http.HttpTimeoutException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.GeneralSecurityException;
import java.security.KeyStore;
import java.security.cert.Certificate;
import java.security.cert.CertificateFactory;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.BiFunction;
import java.util.function.Consumer;
import java.util.function.Function;
import java.util.function.Supplier;
import javax.net.ssl.SSLContext;
import javax.net.ssl.TrustManagerFactory;

/**
 * A client of a mutexd server, or of a group of servers ({@code --ha}). Thread-safe: one
 * client serves any number of threads.
 *
 * <p>Several servers: a request goes first to the server that answered last (the first of
 * the list at the start), or to the active server a {@code Mutexd-Served-By} header named,
 * when that URL is one of the list (a URL the client was not given is never used). On a
 * connection error, a timeout or an answer that is not the API's ({@link TransportException}),
 * or a 503 ({@link UnavailableException}), it is sent to the next server, each at most once
 * per round; any other answer, an error included, is the answer. When a round ends in
 * failures and some were 503 answers, the call pauses for their {@code Retry-After} (the
 * smallest, at most 2 s) and goes round again while that leaves it within its timeout;
 * else it throws the last attempt's error.
 *
 * <p>A partitioned group ({@code --partitions N}, N > 1): a request about one resource goes
 * first to the owner of its partition ({@link Partitions#of}), at the URL the group's map
 * gives, whether or not it is one of the list; then to the list's servers as above. The map
 * ({@code GET /v1/servers}) is read in the background on the first answer that carries
 * {@code Mutexd-Partition}, and again when an answer about a resource was served by another
 * server than the one asked, on a 503 or on a transport error: at most once a second. A
 * reading that fails keeps the map as it was, and never fails a request.
 *
 * <p>Every call blocks its thread. Interrupting the thread (or cancelling the future of
 * {@link #lockAsync} or {@link #acquireAsync}) abandons the request and closes its
 * connection, so that the server drops a queued acquire; the call then throws
 * {@link CancelledException} with the thread's interrupt status set again.
 */
public final class Client implements AutoCloseable {
    /** The client's version, sent in its {@code User-Agent}. */
    public static final String VERSION = "0.1.0";
    /** The server when neither the builder nor {@code MUTEXD_URL} names one. */
    public static final String DEFAULT_URL = "http://127.0.0.1:8080";
    /** The default bound of each request, beyond any wait it asks the server for. */
    public static final Duration DEFAULT_TIMEOUT = Duration.ofSeconds(10);

    private static final long RETRY_AFTER_CAP_NS = TimeUnit.SECONDS.toNanos(2);
    private static final long RETRY_AFTER_MIN_NS = TimeUnit.MILLISECONDS.toNanos(100);
    /** The least time between two readings of the partition map. */
    private static final long RELEARN_INTERVAL_NS = TimeUnit.SECONDS.toNanos(1);

    /** One URL of the client's list. */
    private final class Server {
        final String url; // without a trailing slash
        final String key; // normalised, to compare with Mutexd-Served-By
        volatile HttpClient http;

        Server(String url, String key) {
            this.url = url;
            this.key = key;
            this.http = newHttp();
        }
    }

    private final List<Server> servers = new ArrayList<>();
    private final AtomicInteger current = new AtomicInteger();
    private final PartitionMap pmap = new PartitionMap();
    /** When set (by the tests), sees every answer: the base URL it was sent to, the request, and the answer. */
    volatile AnswerHook onAnswer;
    private final Duration timeout;
    private final String owner;
    private final String token;
    private final SSLContext ssl;
    private final ProxySelector proxy;

    private Client(Builder b) {
        String urls = b.urls;
        if (urls == null || urls.isBlank()) {
            urls = System.getenv("MUTEXD_URL");
            if (urls == null || urls.isBlank()) {
                urls = DEFAULT_URL;
            }
        }
        if (b.timeout.isNegative() || b.timeout.isZero()) {
            throw new IllegalArgumentException("the timeout must be positive");
        }
        this.timeout = b.timeout;
        this.owner = b.owner != null && !b.owner.isEmpty() ? b.owner : defaultOwner();
        this.token = b.token != null && !b.token.isEmpty() ? b.token : null;
        this.proxy = b.proxy;
        try {
            this.ssl = b.ssl != null ? b.ssl : b.caFile != null ? sslFrom(b.caFile) : null;
        } catch (IOException | GeneralSecurityException e) {
            throw new IllegalArgumentException("the CA file " + b.caFile + ": " + e.getMessage(), e);
        }
        for (String part : urls.split(",")) {
            part = part.trim();
            if (!part.isEmpty()) {
                servers.add(server(part));
            }
        }
        if (servers.isEmpty()) {
            throw new IllegalArgumentException("no server URL given");
        }
    }

    /** A client of {@code urls}: one base URL, or several servers of a group, comma-separated. */
    public Client(String urls) {
        this(new Builder().urls(urls));
    }

    /** A client of {@code MUTEXD_URL} (else {@link #DEFAULT_URL}), with {@code MUTEXD_TOKEN} and {@code MUTEXD_CA_FILE}. */
    public static Client fromEnv() {
        return builder().fromEnv().build();
    }

    /** A builder of a client. */
    public static Builder builder() {
        return new Builder();
    }

    /** Configures a {@link Client}. */
    public static final class Builder {
        String urls;
        String token;
        Path caFile;
        SSLContext ssl;
        Duration timeout = DEFAULT_TIMEOUT;
        String owner;
        ProxySelector proxy;

        private Builder() {
        }

        /**
         * One base URL ({@code http://host:port} or {@code https://host:port}, with an
         * optional path prefix), or several servers of a group, comma-separated; default
         * {@code MUTEXD_URL}, else {@link #DEFAULT_URL}.
         */
        public Builder urls(String urls) {
            this.urls = urls;
            return this;
        }

        /** The URLs as a list. */
        public Builder urls(List<String> urls) {
            this.urls = String.join(",", urls);
            return this;
        }

        /** Sent as {@code Authorization: Bearer <token>} with every request. */
        public Builder token(String token) {
            this.token = token;
            return this;
        }

        /** A PEM file of the CA certificates that verify an https:// server, instead of the JDK's. */
        public Builder caFile(Path caFile) {
            this.caFile = caFile;
            return this;
        }

        /** The TLS context of https:// servers (client certificates...); wins over {@link #caFile}. */
        public Builder sslContext(SSLContext ssl) {
            this.ssl = ssl;
            return this;
        }

        /**
         * Bounds each request as a whole: connecting, sending, reading the answer. A queued
         * acquire and a watch add their wait to it. Default 10 s.
         */
        public Builder timeout(Duration timeout) {
            this.timeout = timeout;
            return this;
        }

        /** The default owner of acquire, lock and runWhenLeader; default {@code <host name>:<pid>}. */
        public Builder owner(String owner) {
            this.owner = owner;
            return this;
        }

        /** A proxy to go through; by default none (not even the JDK's proxy properties). */
        public Builder proxy(ProxySelector proxy) {
            this.proxy = proxy;
            return this;
        }

        /** {@code MUTEXD_URL}, {@code MUTEXD_TOKEN} and {@code MUTEXD_CA_FILE}, where set and not set here. */
        public Builder fromEnv() {
            if (urls == null) {
                urls = System.getenv("MUTEXD_URL");
            }
            String t = System.getenv("MUTEXD_TOKEN");
            if (token == null && t != null && !t.isEmpty()) {
                token = t;
            }
            String ca = System.getenv("MUTEXD_CA_FILE");
            if (caFile == null && ssl == null && ca != null && !ca.isEmpty()) {
                caFile = Path.of(ca);
            }
            return this;
        }

        /** The client. */
        public Client build() {
            return new Client(this);
        }
    }

    /** {@code <host name>:<pid>}, the owner sent when none is given. */
    public static String defaultOwner() {
        return hostName() + ":" + ProcessHandle.current().pid();
    }

    /** The machine's host name (in a container, the container's), as the kernel has it. */
    public static String hostName() {
        try {
            String h = Files.readString(Path.of("/proc/sys/kernel/hostname"), StandardCharsets.UTF_8).trim();
            if (!h.isEmpty()) {
                return h;
            }
        } catch (IOException | RuntimeException e) {
            // not Linux: asked otherwise
        }
        String h = System.getenv("HOSTNAME");
        if (h != null && !h.isEmpty()) {
            return h;
        }
        try {
            return InetAddress.getLocalHost().getHostName();
        } catch (IOException e) {
            return "localhost";
        }
    }

    /** A new random lease id (a version 4 UUID), as acquire proposes. */
    public static String newLeaseId() {
        return UUID.randomUUID().toString();
    }

    private static SSLContext sslFrom(Path caFile) throws IOException, GeneralSecurityException {
        KeyStore ks = KeyStore.getInstance(KeyStore.getDefaultType());
        ks.load(null, null);
        int n = 0;
        try (InputStream in = Files.newInputStream(caFile)) {
            for (Certificate c : CertificateFactory.getInstance("X.509").generateCertificates(in)) {
                ks.setCertificateEntry("ca" + n++, c);
            }
        }
        if (n == 0) {
            throw new GeneralSecurityException("no PEM certificate in it");
        }
        TrustManagerFactory tmf = TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm());
        tmf.init(ks);
        SSLContext ctx = SSLContext.getInstance("TLS");
        ctx.init(null, tmf.getTrustManagers(), null);
        return ctx;
    }

    private HttpClient newHttp() {
        HttpClient.Builder b = HttpClient.newBuilder()
                .version(HttpClient.Version.HTTP_1_1)
                .followRedirects(HttpClient.Redirect.NEVER) // the API never redirects
                .connectTimeout(timeout)
                .proxy(proxy != null ? proxy : HttpClient.Builder.NO_PROXY);
        if (ssl != null) {
            b.sslContext(ssl);
        }
        return b.build();
    }

    private Server server(String raw) {
        URI u;
        try {
            u = new URI(raw);
        } catch (URISyntaxException e) {
            throw new IllegalArgumentException("not a URL: " + raw);
        }
        String scheme = u.getScheme() == null ? "" : u.getScheme().toLowerCase(Locale.ROOT);
        if (!scheme.equals("http") && !scheme.equals("https")) {
            throw new IllegalArgumentException("the URL must start with http:// or https://: " + raw);
        }
        if (u.getHost() == null) {
            throw new IllegalArgumentException("the URL has no host: " + raw);
        }
        if (u.getRawQuery() != null || u.getRawFragment() != null || u.getRawUserInfo() != null) {
            throw new IllegalArgumentException("the URL takes no query, fragment or credentials: " + raw);
        }
        String path = stripSlashes(u.getRawPath() == null ? "" : u.getRawPath());
        String hostPort = u.getRawAuthority();
        return new Server(scheme + "://" + hostPort + path, normalise(u));
    }

    private static String stripSlashes(String p) {
        int end = p.length();
        while (end > 0 && p.charAt(end - 1) == '/') {
            end--;
        }
        return p.substring(0, end);
    }

    /** scheme://host:port/path, lower case but the path, the default port written out, no trailing slash. */
    static String normalise(URI u) {
        String scheme = u.getScheme().toLowerCase(Locale.ROOT);
        int port = u.getPort();
        if (port < 0) {
            port = scheme.equals("https") ? 443 : 80;
        }
        return scheme + "://" + u.getHost().toLowerCase(Locale.ROOT) + ":" + port
                + stripSlashes(u.getRawPath() == null ? "" : u.getRawPath());
    }

    /** The base URL of the server asked first: the one that answered last, or the active one its answer named. */
    public String url() {
        return servers.get(current.get()).url;
    }

    /** Every server's base URL, in the order given. */
    public List<String> urls() {
        List<String> out = new ArrayList<>();
        for (Server s : servers) {
            out.add(s.url);
        }
        return out;
    }

    /** The request timeout (beyond any wait). */
    public Duration timeout() {
        return timeout;
    }

    /** The default owner. */
    public String owner() {
        return owner;
    }

    /** Forgets the kept-alive connections: the next requests connect afresh. The client stays usable. */
    @Override
    public void close() {
        for (Server s : servers) {
            s.http = newHttp();
        }
        synchronized (pmap) {
            for (Server s : pmap.others.values()) {
                s.http = newHttp();
            }
        }
    }

    // ---- sending ------------------------------------------------------------------------

    /** An answer of the server. */
    static final class Response {
        final int status;
        final HttpResponse<byte[]> raw;
        final Map<String, Object> body; // a 2xx's JSON object
        final String url;

        Response(int status, HttpResponse<byte[]> raw, Map<String, Object> body, String url) {
            this.status = status;
            this.raw = raw;
            this.body = body;
            this.url = url;
        }
    }

    /**
     * Notes the server that answered (index {@code i}; -1 for a partition's owner the client
     * was not given): it is asked first next time, unless its answer names the active server
     * of its group by a URL of the list ({@code Mutexd-Served-By}), which is asked first
     * instead. Only a URL the client was given is asked first.
     */
    private void served(int i, HttpResponse<?> r) {
        String by = r.headers().firstValue("Mutexd-Served-By").orElse("").trim();
        if (!by.isEmpty()) {
            try {
                URI u = new URI(by);
                if (u.getScheme() != null && u.getHost() != null) {
                    String key = normalise(u);
                    for (int j = 0; j < servers.size(); j++) {
                        if (servers.get(j).key.equals(key)) {
                            i = j;
                            break;
                        }
                    }
                }
            } catch (URISyntaxException e) {
                // not a URL: ignored
            }
        }
        if (i >= 0) {
            current.set(i);
        }
    }

    /**
     * Sends a request to the servers in turn (see the class's comment). {@code limit} bounds
     * each attempt; {@code deadline}, a {@link System#nanoTime()} value or 0, bounds the
     * whole call. The answer is a 2xx; an error answer is thrown as an {@link ApiException}.
     */
    Response send(String method, String path, Object body, Duration limit, long deadline) {
        return sendAbout(null, method, path, body, limit, deadline);
    }

    /** As above; {@code resource}, when not {@code null}, is the one resource the request is about, sent first to its partition's owner. */
    Response sendAbout(String resource, String method, String path, Object body, Duration limit, long deadline) {
        return send(resource, method, path, body == null ? null : Json.write(body), "application/json", limit, deadline);
    }

    Response send(String method, String path, String body, String contentType, Duration limit, long deadline) {
        return send(null, method, path, body, contentType, limit, deadline);
    }

    Response send(String resource, String method, String path, String body, String contentType, Duration limit,
            long deadline) {
        List<Target> targets = targets(resource);
        int k = 0; // the next of targets to try in this round
        long start = System.nanoTime();
        long end = start + limit.toNanos();
        if (deadline != 0 && deadline - end < 0) {
            end = deadline;
        }
        MutexdException last = null;
        long pause = -1;
        for (;;) {
            if (k == targets.size()) { // back at a server tried in this call
                if (targets.size() == 1 || pause < 0) {
                    throw last;
                }
                long wait = Math.max(RETRY_AFTER_MIN_NS, Math.min(pause, RETRY_AFTER_CAP_NS));
                if (System.nanoTime() + wait - end >= 0) {
                    throw last;
                }
                try {
                    TimeUnit.NANOSECONDS.sleep(wait);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    throw new CancelledException(method + " " + path + ": interrupted", e);
                }
                pause = -1;
                // The map may have been read again meanwhile: the owner may be another.
                targets = targets(resource);
                k = 0;
            }
            Target t = targets.get(k++);
            Server s = t.server;
            int i = t.index;
            long each = limit.toNanos();
            if (deadline != 0) {
                long left = deadline - System.nanoTime();
                if (left <= 0) {
                    if (last != null) {
                        throw last;
                    }
                    throw new RequestTimeoutException(method, s.url + path,
                            "the deadline passed before the request was sent", null);
                }
                each = Math.min(each, left);
            }
            Response r;
            try {
                r = exchange(s, method, path, body, contentType, each);
            } catch (TransportException e) {
                last = e;
                if (resource != null) {
                    failed(null);
                }
                continue;
            }
            AnswerHook hook = onAnswer;
            if (hook != null) {
                hook.answered(s.url, method, path, r.status, r.raw.headers());
            }
            if (r.status >= 200 && r.status < 300) {
                if (r.body == null) {
                    last = new ProtocolException(method, r.url, r.status, "answer " + r.status + " is not a JSON object", null);
                    s.http = newHttp();
                    if (resource != null) {
                        failed(null);
                    }
                    continue;
                }
                served(i, r.raw);
                if (resource != null) {
                    answered(s, r.raw);
                }
                return r;
            }
            ApiException err = apiError(r.raw);
            if (r.status == 503) {
                last = err;
                long ra = err.retryAfter() == null ? 0 : err.retryAfter().toNanos();
                if (pause < 0 || ra < pause) {
                    pause = ra;
                }
                if (resource != null) {
                    failed(r.raw);
                }
                continue;
            }
            served(i, r.raw);
            if (resource != null) {
                answered(s, r.raw);
            }
            throw err;
        }
    }

    // ---- routing by the partition map ------------------------------------------------------

    /** Sees every answer, in the tests. */
    interface AnswerHook {
        void answered(String to, String method, String path, int status, java.net.http.HttpHeaders headers);
    }

    /** A server to send one attempt to, and its index in the client's list (-1: an owner the client was not given). */
    private record Target(Server server, int index) {
    }

    /**
     * What the client knows of its group's partitions (docs/api.md, "Partitions"). A
     * partitioned group serves each resource on the owner of its partition; any other server
     * forwards there. Sending straight to the owner saves that hop. Guarded by itself.
     */
    private static final class PartitionMap {
        static final int UNKNOWN = 0; // never read, or every reading so far failed
        static final int FLAT = 1; // the group is not partitioned: nothing is routed
        static final int PARTITIONED = 2; // owners holds the owner of each partition

        int state = UNKNOWN;
        Server[] owners; // the owner of each partition; null while none owns it
        final Map<String, Server> others = new HashMap<>(); // owners the client was not given, by key, kept for their connections
        boolean fetching;
        boolean fetchedOnce;
        long fetchedAt; // System.nanoTime() when the last reading started
    }

    /**
     * The order of one round of attempts: the owner of the resource's partition first, when
     * the map names one, then the client's servers from the one asked first, each once.
     */
    private List<Target> targets(String resource) {
        int n = servers.size();
        int first = current.get();
        Server owner = ownerOf(resource);
        List<Target> out = new ArrayList<>(n + 1);
        if (owner != null) {
            out.add(new Target(owner, servers.indexOf(owner)));
        }
        for (int a = 0; a < n; a++) {
            int i = (first + a) % n;
            if (servers.get(i) != owner) {
                out.add(new Target(servers.get(i), i));
            }
        }
        return out;
    }

    /** The server that owns the resource's partition, or {@code null}: no resource, no map, or no owner at the moment. */
    private Server ownerOf(String resource) {
        if (resource == null) {
            return null;
        }
        synchronized (pmap) {
            if (pmap.state != PartitionMap.PARTITIONED) {
                return null;
            }
            return pmap.owners[Partitions.of(resource, pmap.owners.length)];
        }
    }

    /**
     * Looks at an answer about a resource from {@code s}: the first sign of a partitioned
     * group (a {@code Mutexd-Partition} header) has the map read; an answer served by another
     * server than {@code s} (the request was forwarded: the partition moved, or the map is
     * not known) has it read again.
     */
    private void answered(Server s, HttpResponse<?> r) {
        if (r.headers().firstValue("Mutexd-Partition").isEmpty()) {
            return;
        }
        int state;
        synchronized (pmap) {
            state = pmap.state;
        }
        if (state == PartitionMap.UNKNOWN) {
            relearn();
        } else if (state == PartitionMap.PARTITIONED) {
            String by = r.headers().firstValue("Mutexd-Served-By").orElse("");
            if (!by.isEmpty() && !s.key.equals(keyOf(by))) {
                relearn();
            }
        }
    }

    /** Notes an attempt about a resource that got no answer, or a 503 ({@code r}): in a partitioned group its owner may have moved. */
    private void failed(HttpResponse<?> r) {
        int state;
        synchronized (pmap) {
            state = pmap.state;
        }
        if (state == PartitionMap.PARTITIONED || state == PartitionMap.UNKNOWN && r != null
                && r.headers().firstValue("Mutexd-Partition").isPresent()) {
            relearn();
        }
    }

    /**
     * Reads the map in the background, unless a reading is under way or one started less
     * than {@link #RELEARN_INTERVAL_NS} ago: when a partition moves, every request on it is a
     * surprise at once, and one reading serves them all. The request that asked for it goes
     * on meanwhile.
     */
    private void relearn() {
        synchronized (pmap) {
            long now = System.nanoTime();
            if (pmap.fetching || pmap.fetchedOnce && now - pmap.fetchedAt < RELEARN_INTERVAL_NS) {
                return;
            }
            pmap.fetching = true;
            pmap.fetchedOnce = true;
            pmap.fetchedAt = now;
        }
        Thread t = new Thread(this::learn, "mutexd-partition-map");
        t.setDaemon(true);
        t.start();
    }

    /** Reads the map from the client's servers ({@code GET /v1/servers}) and puts it in force; a failure keeps the old one. */
    private void learn() {
        ServerGroup g = null;
        try {
            g = servers();
        } catch (RuntimeException e) {
            // kept as it was: the next surprise reads it again
        }
        synchronized (pmap) {
            pmap.fetching = false;
            if (g == null) {
                return;
            }
            if (g.partitions() == null || g.partitions().count() <= 1) {
                pmap.state = PartitionMap.FLAT;
                pmap.owners = null;
                return;
            }
            int count = Math.min(g.partitions().count(), Partitions.MAX);
            Server[] owners = new Server[count];
            for (ServerGroup.Owner o : g.partitions().owners()) {
                if (o.url() != null && o.partition() >= 0 && o.partition() < count) {
                    owners[o.partition()] = serverFor(o.url());
                }
            }
            pmap.state = PartitionMap.PARTITIONED;
            pmap.owners = owners;
        }
    }

    /**
     * The server of an owner's advertised URL: the client's own when it is one of its URLs,
     * else one made for it (and kept, with its connections, for the next maps); {@code null}
     * for a URL that cannot be used. Called with the map's lock held.
     */
    private Server serverFor(String raw) {
        String key = keyOf(raw);
        if (key == null) {
            return null;
        }
        for (Server s : servers) {
            if (s.key.equals(key)) {
                return s;
            }
        }
        Server s = pmap.others.get(key);
        if (s == null) {
            try {
                s = server(raw.trim());
            } catch (IllegalArgumentException e) {
                return null;
            }
            pmap.others.put(key, s);
        }
        return s;
    }

    /** The normalised form of a URL (see {@link #normalise}), or {@code null} when it is not one. */
    private static String keyOf(String raw) {
        try {
            URI u = new URI(raw.trim());
            if (u.getScheme() == null || u.getHost() == null) {
                return null;
            }
            return normalise(u);
        } catch (URISyntaxException e) {
            return null;
        }
    }

    /** The owner's URL of each partition as last read ({@code null} for one without), or {@code null} while nothing is routed. */
    List<String> partitionOwners() {
        synchronized (pmap) {
            if (pmap.state != PartitionMap.PARTITIONED) {
                return null;
            }
            List<String> out = new ArrayList<>();
            for (Server s : pmap.owners) {
                out.add(s == null ? null : s.url);
            }
            return out;
        }
    }

    /** One request to one server, within {@code limitNanos}; a transport failure is thrown. */
    private Response exchange(Server s, String method, String path, String body, String contentType, long limitNanos) {
        String target = s.url + path;
        HttpRequest.Builder rb;
        try {
            rb = HttpRequest.newBuilder(new URI(target));
        } catch (URISyntaxException | IllegalArgumentException e) {
            throw new TransportException(method, target, "not a URL: " + e.getMessage(), e);
        }
        Duration limit = Duration.ofNanos(Math.max(limitNanos, TimeUnit.MILLISECONDS.toNanos(1)));
        rb.timeout(limit).header("Accept", "application/json").header("User-Agent", "mutexd-java/" + VERSION);
        if (token != null) {
            rb.header("Authorization", "Bearer " + token);
        }
        if (body != null) {
            if (contentType != null) {
                rb.header("Content-Type", contentType);
            }
            rb.method(method, HttpRequest.BodyPublishers.ofByteArray(body.getBytes(StandardCharsets.UTF_8)));
        } else {
            rb.method(method, HttpRequest.BodyPublishers.noBody());
        }
        HttpClient http = s.http;
        CompletableFuture<HttpResponse<byte[]>> cf = http.sendAsync(rb.build(), HttpResponse.BodyHandlers.ofByteArray());
        HttpResponse<byte[]> res;
        try {
            // The request's own timeout ends it; this one only guards against a stuck exchange.
            res = cf.get(limit.toNanos() + TimeUnit.SECONDS.toNanos(1), TimeUnit.NANOSECONDS);
        } catch (InterruptedException e) {
            cf.cancel(true); // aborts the exchange: the connection is closed
            Thread.currentThread().interrupt();
            throw new CancelledException(method + " " + target + ": interrupted", e);
        } catch (java.util.concurrent.TimeoutException e) {
            cf.cancel(true);
            s.http = newHttp();
            throw new RequestTimeoutException(method, target, "no answer within " + limit.toMillis() + " ms", e);
        } catch (CancellationException e) {
            throw new CancelledException(method + " " + target + ": cancelled", e);
        } catch (ExecutionException e) {
            Throwable c = e.getCause();
            // After a failure the kept-alive connections may lead nowhere (a server that
            // restarted, or moved): the next request connects afresh.
            if (s.http == http) {
                s.http = newHttp();
            }
            if (c instanceof HttpConnectTimeoutException || c instanceof HttpTimeoutException) {
                throw new RequestTimeoutException(method, target, "no answer within " + limit.toMillis() + " ms", c);
            }
            if (c instanceof ConnectException) {
                throw new TransportException(method, target, "cannot connect: " + c, c);
            }
            throw new TransportException(method, target, String.valueOf(c), c);
        }
        Map<String, Object> obj = null;
        if (res.statusCode() >= 200 && res.statusCode() < 300) {
            try {
                Object v = Json.parse(new String(res.body(), StandardCharsets.UTF_8));
                if (v instanceof Map) {
                    obj = Types.map(v);
                }
            } catch (IllegalArgumentException e) {
                obj = null;
            }
        }
        return new Response(res.statusCode(), res, obj, target);
    }

    static ApiException apiError(HttpResponse<byte[]> r) {
        Duration retryAfter = null;
        String ra = r.headers().firstValue("Retry-After").orElse(null);
        if (ra != null) {
            try {
                retryAfter = Duration.ofSeconds(Long.parseLong(ra.trim()));
            } catch (NumberFormatException e) {
                retryAfter = null;
            }
        }
        String code = null;
        String message = "HTTP " + r.statusCode();
        Map<String, Object> error = null;
        try {
            Object v = Json.parse(new String(r.body(), StandardCharsets.UTF_8));
            if (v instanceof Map && Types.map(v).get("error") instanceof Map) {
                error = Types.map(Types.map(v).get("error"));
                if (error.get("code") instanceof String) {
                    code = (String) error.get("code");
                }
                if (error.get("message") instanceof String) {
                    message = (String) error.get("message");
                }
            }
        } catch (IllegalArgumentException e) {
            // not the API's error body: the class of its status
        }
        return ApiException.of(r.statusCode(), code, message, retryAfter, error);
    }

    // ---- paths ----------------------------------------------------------------------------

    /**
     * Percent-encodes all but the characters the API allows in a name; a hash tag's
     * <code>{</code> and <code>}</code> too, which the contract has sent as %7B and %7D.
     */
    static String escape(String s) {
        StringBuilder b = new StringBuilder();
        for (byte by : s.getBytes(StandardCharsets.UTF_8)) {
            int ch = by & 0xff;
            if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9')
                    || "-._~/:@".indexOf(ch) >= 0) {
                b.append((char) ch);
            } else {
                b.append('%').append(Character.toUpperCase(Character.forDigit(ch >> 4, 16)))
                        .append(Character.toUpperCase(Character.forDigit(ch & 15, 16)));
            }
        }
        return b.toString();
    }

    private static String resourcePath(String resource) {
        if (resource == null || resource.isEmpty()) {
            throw new IllegalArgumentException("the resource must not be empty");
        }
        return "/v1/resources/" + escape(resource);
    }

    private static String query(Object... pairs) {
        StringBuilder b = new StringBuilder();
        for (int k = 0; k + 1 < pairs.length; k += 2) {
            if (pairs[k + 1] == null || "".equals(pairs[k + 1])) {
                continue;
            }
            b.append(b.length() == 0 ? '?' : '&').append(pairs[k]).append('=').append(escape(String.valueOf(pairs[k + 1])));
        }
        return b.toString();
    }

    private static long ms(Duration d) {
        return d.plusNanos(500_000).toMillis();
    }

    private static <T> T read(Response r, Function<Map<String, Object>, T> f) {
        try {
            return f.apply(r.body);
        } catch (RuntimeException e) {
            throw new ProtocolException("", r.url, r.status, "the server's answer is malformed: " + e.getMessage(), e);
        }
    }

    // ---- the calls --------------------------------------------------------------------------

    /**
     * Acquires a lease on {@code resource} ({@code POST .../acquire}), waiting in the
     * resource's queue up to {@code o.waitFor} if it is held. Proposes a lease id (a random
     * one unless given) and sends the same one to every server it tries.
     *
     * @throws LeaseHeldException held by another (and the wait, if any, ran out)
     * @throws LimitMismatchException the resource is held under another limit
     * @throws TooManyWaitersException the queue is full
     */
    public Grant acquire(String resource, AcquireOptions o) {
        return sendAcquire(resource, resourcePath(resource) + "/acquire", null, o, Grant::from);
    }

    /**
     * Sends an acquire (of several resources, when {@code resources} is not {@code null}) about
     * {@code about} to {@code path}, and decodes its answer with {@code decode}, given when the
     * leases' time runs from.
     */
    private <T> T sendAcquire(String about, String path, List<String> resources, AcquireOptions o,
            BiFunction<Map<String, Object>, Long, T> decode) {
        if (o == null) {
            o = new AcquireOptions();
        }
        Map<String, Object> body = acquireBody(o, resources);
        Duration wait = o.wait != null ? o.wait : Duration.ZERO;
        long sent = System.nanoTime();
        Response r = sendAbout(about, "POST", path, body, timeout.plus(wait), 0);
        // The lease's time runs from the grant: at the latest when the request was sent, or,
        // after a wait in the queue, when the answer arrived.
        long base = wait.isZero() ? sent : System.nanoTime();
        return read(r, m -> decode.apply(m, base));
    }

    /** The body of an acquire (of several resources, when {@code resources} is not {@code null}). */
    private Map<String, Object> acquireBody(AcquireOptions o, List<String> resources) {
        Map<String, Object> body = new LinkedHashMap<>();
        if (resources != null) {
            body.put("resources", resources);
        }
        body.put("owner", o.owner != null ? o.owner : owner);
        if (o.ttl != null) {
            body.put("ttl_ms", ms(o.ttl));
        }
        body.put("lease_id", o.leaseId != null ? o.leaseId : newLeaseId());
        Duration wait = o.wait != null ? o.wait : Duration.ZERO;
        if (!wait.isZero()) {
            body.put("wait_ms", ms(wait));
        }
        if (o.metadata != null) {
            body.put("metadata", o.metadata);
        }
        if (o.limit != null) {
            body.put("limit", o.limit);
        }
        if (o.shared != null) {
            body.put("shared", o.shared);
        }
        return body;
    }

    /** As {@link #acquire}, in the background: cancelling the future hangs up, so that the server drops the waiter. */
    public CompletableFuture<Grant> acquireAsync(String resource, AcquireOptions o) {
        return async(() -> acquire(resource, o), null);
    }

    /**
     * Renews a lease ({@code POST .../renew}). {@code ttl} (or {@code null}: the lease's own)
     * and {@code metadata} (or {@code null}: unchanged) are optional.
     *
     * @throws LeaseLostException the lease is no longer the resource's
     */
    public Grant renew(String resource, String leaseId, Duration ttl, Object metadata) {
        return renew(resource, leaseId, ttl, metadata, timeout, 0);
    }

    /**
     * As {@link #renew(String, String, Duration, Object)}, each attempt within {@code limit},
     * and no attempt, on any server, started or lasting past {@code deadline} (a
     * {@link System#nanoTime()} value; 0: none).
     */
    public Grant renew(String resource, String leaseId, Duration ttl, Object metadata, Duration limit, long deadline) {
        Map<String, Object> body = renewBody(null, leaseId, ttl, metadata);
        long sent = System.nanoTime();
        Response r = sendAbout(resource, "POST", resourcePath(resource) + "/renew", body, limit, deadline);
        return read(r, m -> Grant.from(m, sent));
    }

    /** The body of a renewal (of several resources, when {@code resources} is not {@code null}). */
    private static Map<String, Object> renewBody(List<String> resources, String leaseId, Duration ttl, Object metadata) {
        Map<String, Object> body = new LinkedHashMap<>();
        if (resources != null) {
            body.put("resources", resources);
        }
        body.put("lease_id", leaseId);
        if (ttl != null) {
            body.put("ttl_ms", ms(ttl));
        }
        if (metadata != null) {
            body.put("metadata", metadata);
        }
        return body;
    }

    /**
     * Releases a lease ({@code POST .../release}); the next waiter is granted at once.
     *
     * @throws LeaseLostException the lease is no longer the resource's (the holder keeps its own)
     */
    public void release(String resource, String leaseId) {
        Map<String, Object> body = new LinkedHashMap<>();
        if (leaseId != null) {
            body.put("lease_id", leaseId);
        }
        sendAbout(resource, "POST", resourcePath(resource) + "/release", body, timeout, 0);
    }

    /**
     * Ends the current leases of a resource whoever holds them ({@code POST .../break}), or
     * only the one {@code leaseId} names (when not {@code null}); {@code reason} is optional.
     * Returns whether a lease was ended. Needs the {@code admin} scope.
     */
    public boolean breakLease(String resource, String reason, String leaseId) {
        Map<String, Object> body = new LinkedHashMap<>();
        if (reason != null) {
            body.put("reason", reason);
        }
        if (leaseId != null) {
            body.put("lease_id", leaseId);
        }
        Response r = sendAbout(resource, "POST", resourcePath(resource) + "/break", body, timeout, 0);
        return read(r, m -> Types.bool(m, "broken"));
    }

    // ---- several resources at once ----------------------------------------------------------

    /** The names of a request about several resources: at least one, none empty (the server checks the rest). */
    private static List<String> names(List<String> resources) {
        if (resources == null || resources.isEmpty()) {
            throw new IllegalArgumentException("no resource named");
        }
        List<String> out = List.copyOf(resources); // no null
        for (String r : out) {
            if (r.isEmpty()) {
                throw new IllegalArgumentException("the resource must not be empty");
            }
        }
        return out;
    }

    /** The leases of {@code {"leases": [...]}}: one per name, in the order asked, of one lease id. */
    private static List<Grant> grants(Map<String, Object> m, List<String> names, long base) {
        List<Grant> gs = Types.each(m.get("leases"), x -> Grant.from(x, base));
        if (!m.containsKey("leases") || gs.size() != names.size()) {
            throw new IllegalArgumentException(gs.size() + " leases for " + names.size() + " resources");
        }
        for (int i = 0; i < gs.size(); i++) {
            if (!gs.get(i).resource().equals(names.get(i))) {
                throw new IllegalArgumentException("lease " + i + " is on " + gs.get(i).resource() + ", not " + names.get(i));
            }
            if (!gs.get(i).leaseId().equals(gs.get(0).leaseId())) {
                throw new IllegalArgumentException("the leases have different lease ids");
            }
        }
        return gs;
    }

    /**
     * Acquires a lease on every one of {@code resources} (2 to 64 names, each once), or on
     * none, with one request ({@code POST /v1/acquire}); the options are {@link #acquire}'s and
     * apply to each lease. Returns the leases, one per resource in the order given, all with
     * one lease id (the one proposed, sent again unchanged to the next server: a retry gets the
     * same leases back), each with its own fencing token.
     *
     * <p>With {@code o.waitFor} the request waits in the queue of every resource and is granted
     * all at once when it heads each (no deadlock, whatever the order of the names in
     * concurrent requests). It goes to the server of the first name's partition: on a
     * partitioned group every name must be in that partition (a hash tag: {@code {acct}/alice},
     * {@code {acct}/bob}), else {@link InvalidRequestException} ({@code field} "resources");
     * see {@link #lockOrdered} for names of different partitions.
     *
     * @throws LeaseHeldException a resource is held (at once, or when the wait ran out):
     *     {@link ApiException#resource()} is the first held in the order given, {@code holder()}
     *     who holds it. Nothing was granted.
     * @throws LimitMismatchException as {@link #acquire}
     * @throws TooManyWaitersException as {@link #acquire}
     */
    public List<Grant> acquireMany(List<String> resources, AcquireOptions o) {
        List<String> names = names(resources);
        return sendAcquire(names.get(0), "/v1/acquire", names, o, (m, base) -> grants(m, names, base));
    }

    /**
     * Renews the leases of {@code leaseId} on every one of {@code resources} with one request
     * ({@code POST /v1/renew}): each now expires {@code ttl} (or {@code null}: its own TTL)
     * from now and keeps its fencing token; {@code metadata} (or {@code null}: unchanged)
     * replaces each lease's. Returns the leases in the order given.
     *
     * @throws LeaseLostException the lease id no longer holds some of them:
     *     {@link LeaseLostException#resources()} names which. The others WERE renewed.
     */
    public List<Grant> renewMany(List<String> resources, String leaseId, Duration ttl, Object metadata) {
        return renewMany(resources, leaseId, ttl, metadata, timeout, 0);
    }

    /**
     * As {@link #renewMany(List, String, Duration, Object)}, each attempt within {@code limit},
     * and no attempt, on any server, started or lasting past {@code deadline} (a
     * {@link System#nanoTime()} value; 0: none).
     */
    public List<Grant> renewMany(List<String> resources, String leaseId, Duration ttl, Object metadata, Duration limit,
            long deadline) {
        List<String> names = names(resources);
        Map<String, Object> body = renewBody(names, leaseId, ttl, metadata);
        long sent = System.nanoTime();
        Response r = sendAbout(names.get(0), "POST", "/v1/renew", body, limit, deadline);
        return read(r, m -> grants(m, names, sent));
    }

    /**
     * Releases the leases of {@code leaseId} on every one of {@code resources} with one request
     * ({@code POST /v1/release}); each resource's next waiter is granted at once.
     *
     * @throws LeaseLostException the lease id no longer holds some of them:
     *     {@link LeaseLostException#resources()} names which. The others WERE released.
     */
    public void releaseMany(List<String> resources, String leaseId) {
        List<String> names = names(resources);
        Map<String, Object> body = new LinkedHashMap<>();
        body.put("resources", names);
        body.put("lease_id", leaseId);
        sendAbout(names.get(0), "POST", "/v1/release", body, timeout, 0);
    }

    /** A resource's state ({@code GET /v1/resources/{resource}}); a name never used is free. */
    public ResourceState get(String resource) {
        return read(sendAbout(resource, "GET", resourcePath(resource), null, timeout, 0), ResourceState::from);
    }

    /**
     * Watches a resource: its state once its {@code index} differs from {@code index}, or
     * after {@code wait} with the state unchanged.
     */
    public ResourceState watch(String resource, long index, Duration wait) {
        String q = query("index", Long.toUnsignedString(index), "wait_ms", ms(wait));
        return read(sendAbout(resource, "GET", resourcePath(resource) + q, null, timeout.plus(wait), 0), ResourceState::from);
    }

    /**
     * The held resources whose names start with {@code prefix} (or all, if {@code null}),
     * in name order, at most {@code limit} (0: the server's default, 100) from {@code cursor}
     * (or the start, if {@code null}).
     */
    public ResourceList list(String prefix, int limit, String cursor) {
        String q = query("prefix", prefix, "limit", limit > 0 ? limit : null, "cursor", cursor);
        return read(send("GET", "/v1/resources" + q, null, timeout, 0), ResourceList::from);
    }

    /**
     * A list watch: the list (as {@link #list}) once a resource under {@code prefix} changed
     * after change index {@code index}, or after {@code wait}. Pass the answer's
     * {@link ResourceList#index()} to the next call. A partitioned group refuses an index
     * other than 0: see {@link #listWatch(String, Position, Duration, int, String)}.
     */
    public ResourceList listWatch(String prefix, long index, Duration wait, int limit, String cursor) {
        return listWatch(prefix, Position.of(index), wait, limit, cursor);
    }

    /**
     * A list watch from {@code position} (a list's {@link ResourceList#position()}, passed
     * unchanged; {@code null}: from the start), which works on every group, a partitioned one
     * too. Pass the answer's {@link ResourceList#position()} to the next call.
     */
    public ResourceList listWatch(String prefix, Position position, Duration wait, int limit, String cursor) {
        String q = query("prefix", prefix, "index", position != null ? position.value() : "0", "wait_ms", ms(wait),
                "limit", limit > 0 ? limit : null, "cursor", cursor);
        return read(send("GET", "/v1/resources" + q, null, timeout.plus(wait), 0), ResourceList::from);
    }

    /**
     * The recent changes after change index {@code after}, oldest first, under
     * {@code prefix} (or all), at most {@code limit} (0: 100); with a {@code wait} (or
     * {@code null}) held until there is one. Pass the answer's {@link EventPage#next()} as the
     * next {@code after}. A partitioned group refuses an {@code after} other than 0: see
     * {@link #events(Position, String, int, Duration)}.
     */
    public EventPage events(long after, String prefix, int limit, Duration wait) {
        // 0 is the server's default, so it goes unsaid: a partitioned group takes it then too.
        return events(after == 0 ? null : Position.of(after), prefix, limit, wait);
    }

    /**
     * As {@link #events(long, String, int, Duration)}, after {@code after} (a page's
     * {@link EventPage#nextPosition()}, passed unchanged; {@code null}: the oldest the server
     * keeps), which works on every group, a partitioned one too. Pass the answer's
     * {@link EventPage#nextPosition()} as the next {@code after}.
     */
    public EventPage events(Position after, String prefix, int limit, Duration wait) {
        String q = query("after", after != null ? after.value() : null, "prefix", prefix,
                "limit", limit > 0 ? limit : null, "wait_ms", wait != null ? ms(wait) : null);
        return read(send("GET", "/v1/events" + q, null, wait != null ? timeout.plus(wait) : timeout, 0), EventPage::from);
    }

    /** The server group ({@code GET /v1/servers}). */
    public ServerGroup servers() {
        return read(send("GET", "/v1/servers", null, timeout, 0), ServerGroup::from);
    }

    /** The token presented and its scopes ({@code GET /v1/whoami}). */
    public Whoami whoami() {
        return read(send("GET", "/v1/whoami", null, timeout, 0), Whoami::from);
    }

    // ---- the lock and the leader ---------------------------------------------------------------

    /**
     * Acquires a lease on {@code resource} and keeps it alive in the background until it is
     * released ({@link Lease#close()}); see {@link Lease}. When the acquire got no usable
     * answer, or was interrupted (the grant may have happened without its answer reaching
     * us), the proposed lease is released, best effort, before the error is thrown.
     */
    public Lease lock(String resource, LockOptions o) {
        return hold(acquireOwn(o, a -> acquire(resource, a), leaseId -> releaseQuietly(resource, leaseId)));
    }

    /**
     * Acquires with {@code acquire}, given {@code o}'s options and a new lease id; when it got
     * no usable answer, or was interrupted (the grant may have happened without its answer
     * reaching us), gives the lease id's leases back with {@code giveBack} before the error is
     * thrown.
     */
    private <T> T acquireOwn(LockOptions o, Function<AcquireOptions, T> acquire, Consumer<String> giveBack) {
        if (o == null) {
            o = new LockOptions();
        }
        String leaseId = newLeaseId();
        try {
            return acquire.apply(o.acquireOptions(leaseId));
        } catch (TransportException | CancelledException e) {
            giveBack.accept(leaseId);
            throw e;
        }
    }

    /** As {@link #lock}, in the background: cancelling the future hangs up (the server drops the waiter). */
    public CompletableFuture<Lease> lockAsync(String resource, LockOptions o) {
        return async(() -> lock(resource, o), Lease::close);
    }

    /** Keeps a granted lease alive in the background, as {@link #lock} does with the lease it acquires. */
    public Lease hold(Grant g) {
        Lease l = new Lease(this, g);
        l.start();
        return l;
    }

    /**
     * Acquires a lease on every one of {@code resources} (2 to 64 names, each once), all at
     * once or none, with one request ({@link #acquireMany}), and keeps them alive in the
     * background as a set until it is released ({@link LeaseSet#close()}): one request renews
     * the whole set every third of the TTL, and one releases it. The options are
     * {@link #lock}'s and apply to each lease; {@code waitFor} is how long the request may
     * wait in the queue of every resource. A held resource (at once, or when the wait ran
     * out) is a {@link LeaseHeldException} whose {@link ApiException#resource()} is the first
     * held in the order given; nothing is granted then.
     *
     * <p>The set is lost the moment a renewal of the set is answered {@code lease_lost} (any
     * one of its leases was broken, or taken by another after it expired:
     * {@link LeaseLostException#resources()} names which), or when no renewal of the set
     * succeeded before its deadline ({@link LeaseExpiredException}), as {@link #lock}'s lease,
     * its deadline the earliest of the leases'. See {@link LeaseSet}.
     *
     * <p>On a partitioned group every name must be in one partition (a hash tag:
     * {@code {acct}/alice}, {@code {acct}/bob}), else {@link InvalidRequestException}; for
     * names of different partitions, {@link #lockOrdered}. When the acquire got no usable
     * answer, or was interrupted, the proposed leases are released, best effort, before the
     * error is thrown.
     */
    public LeaseSet lockMany(List<String> resources, LockOptions o) {
        return LeaseSet.hold(this,
                acquireOwn(o, a -> acquireMany(resources, a), leaseId -> releaseManyQuietly(resources, leaseId)));
    }

    /**
     * Takes a lease on every one of {@code resources}, in any partitions, and keeps each alive
     * in the background until the set is released: Curator's {@code InterProcessMultiLock}.
     * It takes them one by one with {@link #lock}, in sorted name order (so that two processes
     * taking overlapping sets never wait on each other in a circle), all within
     * {@code o.waitFor} (the wait left is given to each; once it has run out, each is still
     * tried once, without waiting). When one fails ({@link LeaseHeldException} when the wait
     * ran out, or any other error), the leases already taken are released, the last taken
     * first, and that exception is thrown (an {@link ApiException}'s
     * {@link ApiException#resource()} names the resource that failed).
     *
     * <p>Each lease is renewed on its own (the options are {@link #lock}'s, and apply to each);
     * the set is lost the moment any one of them is lost, with that lease's exception.
     * Releasing the set releases every lease, the last taken first.
     *
     * <p>Unlike {@link #lockMany} the leases are not granted at once: while it waits for one
     * resource it holds those before it in order. Prefer {@link #lockMany} for names of one
     * partition (or on a lone server).
     *
     * @throws IllegalArgumentException no name, an empty one, or one named twice
     */
    public LeaseSet lockOrdered(List<String> resources, LockOptions o) {
        if (o == null) {
            o = new LockOptions();
        }
        List<String> sorted = new ArrayList<>(names(resources));
        sorted.sort(null);
        for (int i = 1; i < sorted.size(); i++) {
            if (sorted.get(i).equals(sorted.get(i - 1))) {
                throw new IllegalArgumentException(sorted.get(i) + " is named twice");
            }
        }
        Duration wait = o.wait != null ? o.wait : Duration.ZERO;
        if (wait.isNegative()) {
            throw new IllegalArgumentException("the wait must not be negative");
        }
        long end = System.nanoTime() + wait.toNanos();
        List<Lease> taken = new ArrayList<>();
        try {
            for (String name : sorted) {
                LockOptions each = o.copy();
                if (!wait.isZero()) {
                    long left = end - System.nanoTime();
                    each.waitFor(left < TimeUnit.MILLISECONDS.toNanos(1) ? null : Duration.ofNanos(left));
                }
                try {
                    taken.add(lock(name, each));
                } catch (ApiException e) {
                    if (e.resource() == null) {
                        e.resource(name);
                    }
                    throw e;
                }
            }
            // One lost while the next were taken: the set is of no use.
            for (Lease l : taken) {
                l.check();
            }
        } catch (RuntimeException e) {
            for (int i = taken.size() - 1; i >= 0; i--) {
                uninterrupted(taken.get(i)::close); // best effort
            }
            throw e;
        }
        return LeaseSet.ordered(this, taken);
    }

    /** Gives back leases that may have been granted, whatever the thread's interrupt status. */
    void releaseManyQuietly(List<String> resources, String leaseId) {
        try {
            uninterrupted(() -> releaseMany(resources, leaseId));
        } catch (IllegalArgumentException e) {
            // best effort
        }
    }

    /** Gives back a lease that may have been granted, whatever the thread's interrupt status. */
    void releaseQuietly(String resource, String leaseId) {
        uninterrupted(() -> release(resource, leaseId)); // best effort
    }

    /**
     * Runs {@code call} with this thread's interrupt status cleared (and set again after, if
     * it was); returns the {@link MutexdException} it threw, or {@code null}.
     */
    static MutexdException uninterrupted(Runnable call) {
        boolean interrupted = Thread.interrupted();
        try {
            call.run();
            return null;
        } catch (MutexdException e) {
            return e;
        } finally {
            if (interrupted) {
                Thread.currentThread().interrupt();
            }
        }
    }

    /**
     * Runs {@code task} whenever this process holds the lease on {@code resource}: the leader
     * election loop, until {@code o.stopOn} completes or this thread is interrupted.
     *
     * <ol>
     * <li>Try to acquire the lease, without waiting in the queue. When it is held by another,
     * or the call failed for a reason that may pass ({@link MutexdException#isRetryable}),
     * call {@code onStandby} if set, wait {@code retryInterval} (or until stopped) and try
     * again. Any other error (a bad name or TTL, a refused token) is thrown.</li>
     * <li>Granted: renew the lease in the background and call {@code task.lead(leadership)}
     * in this thread; {@link Leadership#token()} is the fencing token.</li>
     * <li>Lost (a renewal answered {@code lease_lost}, or no renewal succeeded before the
     * lease's deadline on the monotonic clock): {@link Leadership#shouldStop()} is true at
     * that very moment, and {@link Leadership#stopped()} completes. The task must stop at
     * once and return; the loop waits for it, and goes back to step 1.</li>
     * <li>Stopped: the task is told to stop likewise; once it returns the lease is released,
     * so that another process takes over at once, and this method returns.</li>
     * <li>The task returns by itself while the lease is held: the lease is released and the
     * loop waits {@code retryInterval}. The task throws (but after it was told to stop): the
     * lease is released and the exception is thrown on, a checked one wrapped in a
     * {@link MutexdException}.</li>
     * </ol>
     */
    public void runWhenLeader(String resource, LeaderTask task, LeaderOptions o) {
        if (o == null) {
            o = new LeaderOptions();
        }
        CompletableFuture<?> stop = o.stop;
        String leaseId = newLeaseId();
        try {
            while (!stop.isDone() && !Thread.currentThread().isInterrupted()) {
                Grant g;
                try {
                    g = acquire(resource, new AcquireOptions().owner(o.owner).ttl(o.ttl).leaseId(leaseId).metadata(o.metadata));
                } catch (CancelledException e) {
                    releaseQuietly(resource, leaseId);
                    return;
                } catch (MutexdException e) {
                    if (!(e instanceof LeaseHeldException) && !MutexdException.isRetryable(e)) {
                        throw e;
                    }
                    if (o.onStandby != null) {
                        o.onStandby.accept(e, o.retryInterval);
                    }
                    pause(stop, o.retryInterval);
                    continue;
                }
                leaseId = newLeaseId();
                if (stop.isDone() || Thread.currentThread().isInterrupted()) {
                    releaseQuietly(resource, g.leaseId());
                    return;
                }
                Lease lease = hold(g);
                Leadership l = new Leadership(lease, stop);
                boolean byItself;
                try {
                    task.lead(l);
                    byItself = !l.shouldStop();
                } catch (RuntimeException e) {
                    if (!l.shouldStop()) {
                        throw e;
                    }
                    byItself = false;
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    byItself = false;
                } catch (Exception e) {
                    if (!l.shouldStop()) {
                        throw new MutexdException("the leader's task failed: " + e, e);
                    } else {
                        byItself = false;
                    }
                } finally {
                    uninterrupted(lease::close); // best effort: it runs out by itself
                }
                if (byItself) {
                    pause(stop, o.retryInterval);
                }
            }
        } finally {
            // nothing else is held here
        }
    }

    /** As {@link #runWhenLeader(String, LeaderTask, LeaderOptions)} with the default options. */
    public void runWhenLeader(String resource, LeaderTask task) {
        runWhenLeader(resource, task, null);
    }

    private static void pause(CompletableFuture<?> stop, Duration d) {
        try {
            stop.get(d.toNanos(), TimeUnit.NANOSECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        } catch (java.util.concurrent.TimeoutException | ExecutionException | CancellationException e) {
            // the pause is over, or the loop is stopped
        }
    }

    /** Runs a call on a thread of its own; cancelling the future interrupts it. */
    private static <T> CompletableFuture<T> async(Supplier<T> call, Consumer<T> undo) {
        Thread[] runner = new Thread[1];
        CompletableFuture<T> f = new CompletableFuture<>() {
            @Override
            public boolean cancel(boolean mayInterrupt) {
                boolean done = super.cancel(mayInterrupt);
                if (done) {
                    runner[0].interrupt();
                }
                return done;
            }
        };
        Thread t = new Thread(() -> {
            try {
                T v = call.get();
                if (!f.complete(v) && undo != null) {
                    undo.accept(v); // cancelled meanwhile: give it back
                }
            } catch (Throwable e) {
                f.completeExceptionally(e);
            }
        }, "mutexd-call");
        t.setDaemon(true);
        runner[0] = t;
        t.start();
        return f;
    }
}
