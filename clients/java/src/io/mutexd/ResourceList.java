package io.mutexd;

import java.util.List;
import java.util.Map;

/**
 * A page of held resources, in name order; {@code nextCursor} is the cursor of the next
 * page ({@code null}: the last one); {@code index} the server's change index when it was
 * read (what a list watch passes on); {@code position} the same as the server wrote it: on a
 * partitioned group, where {@code index} is 0, the only one to watch from (see {@link Position}).
 */
public record ResourceList(List<ResourceState> resources, String nextCursor, long index, Position position) {

    static ResourceList from(Map<String, Object> m) {
        return new ResourceList(Types.each(m.get("resources"), ResourceState::from), Types.str(m, "next_cursor"),
                Types.index(m, "index"), Types.position(m, "index"));
    }
}
