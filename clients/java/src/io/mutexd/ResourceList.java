package io.mutexd;

import java.util.List;
import java.util.Map;

/**
 * A page of held resources, in name order; {@code nextCursor} is the cursor of the next
 * page ({@code null}: the last one); {@code index} the server's change index when it was
 * read (what a list watch passes on).
 */
public record ResourceList(List<ResourceState> resources, String nextCursor, long index) {

    static ResourceList from(Map<String, Object> m) {
        return new ResourceList(Types.each(m.get("resources"), ResourceState::from), Types.str(m, "next_cursor"),
                Types.num(m, "index"));
    }
}
