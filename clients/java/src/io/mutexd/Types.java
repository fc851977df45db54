package io.mutexd;

import java.math.BigInteger;
import java.time.Instant;
import java.time.format.DateTimeParseException;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/** Reading the fields of the server's answers. */
final class Types {
    private Types() {
    }

    @SuppressWarnings("unchecked")
    static Map<String, Object> map(Object o) {
        if (!(o instanceof Map)) {
            throw new IllegalArgumentException("an object was expected");
        }
        return (Map<String, Object>) o;
    }

    static Map<String, Object> mapOrNull(Object o) {
        return o == null ? null : map(o);
    }

    static List<Object> list(Object o) {
        if (o == null) {
            return List.of();
        }
        if (!(o instanceof List)) {
            throw new IllegalArgumentException("an array was expected");
        }
        @SuppressWarnings("unchecked")
        List<Object> l = (List<Object>) o;
        return l;
    }

    static String str(Map<String, Object> m, String k) {
        Object o = m.get(k);
        if (o != null && !(o instanceof String)) {
            throw new IllegalArgumentException(k + ": a string was expected");
        }
        return (String) o;
    }

    static long num(Map<String, Object> m, String k) {
        Object o = m.get(k);
        if (o == null) {
            return 0;
        }
        if (o instanceof BigInteger) {
            return ((BigInteger) o).longValue(); // an unsigned 64-bit value: the same bits
        }
        if (!(o instanceof Number)) {
            throw new IllegalArgumentException(k + ": a number was expected");
        }
        return ((Number) o).longValue();
    }

    /**
     * A list's index or the events' next as a number: the change index, or 0 for a
     * partitioned group's position (a string), which {@link #position} reads.
     */
    static long index(Map<String, Object> m, String k) {
        return m.get(k) instanceof String ? 0 : num(m, k);
    }

    /** A list's index or the events' next as the server wrote it; {@code null} when absent. */
    static Position position(Map<String, Object> m, String k) {
        Object o = m.get(k);
        if (o == null) {
            return null;
        }
        if (o instanceof String) {
            return new Position((String) o);
        }
        return Position.of(num(m, k));
    }

    /** An optional integer field: {@code null} when absent. */
    static Integer intOrNull(Map<String, Object> m, String k) {
        return m.get(k) == null ? null : (int) num(m, k);
    }

    static boolean bool(Map<String, Object> m, String k) {
        return Boolean.TRUE.equals(m.get(k));
    }

    static Instant time(Map<String, Object> m, String k) {
        String s = str(m, k);
        if (s == null) {
            return null;
        }
        try {
            return Instant.parse(s);
        } catch (DateTimeParseException e) {
            return null; // informative only
        }
    }

    static <T> List<T> each(Object o, java.util.function.Function<Map<String, Object>, T> f) {
        List<T> out = new ArrayList<>();
        for (Object x : list(o)) {
            out.add(f.apply(map(x)));
        }
        return List.copyOf(out);
    }
}
