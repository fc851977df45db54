package io.mutexd;

import java.util.List;
import java.util.Map;

/**
 * A resource as {@code GET /v1/resources/{resource}} and the list show it: {@code state}
 * {@code "held"} or {@code "free"}, its change {@code index}, {@code holder} (the first of
 * {@code holders}, or {@code null}), every holder oldest grant first, its {@code limit}, and
 * how many acquires wait in its queue ({@code waiters}).
 */
public record ResourceState(String resource, String state, long index, Holder holder,
        List<Holder> holders, int limit, long waiters) {

    /** Whether at least one lease holds the resource. */
    public boolean isHeld() {
        return "held".equals(state);
    }

    static ResourceState from(Map<String, Object> m) {
        Map<String, Object> h = Types.mapOrNull(m.get("holder"));
        List<Holder> holders = Types.each(m.get("holders"), Holder::from);
        Holder first = h != null ? Holder.from(h) : (holders.isEmpty() ? null : holders.get(0));
        if (holders.isEmpty() && first != null) {
            holders = List.of(first);
        }
        long limit = Types.num(m, "limit");
        return new ResourceState(Types.str(m, "resource"), Types.str(m, "state"), Types.num(m, "index"),
                first, holders, limit == 0 ? 1 : (int) limit, Types.num(m, "waiters"));
    }
}
