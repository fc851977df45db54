package io.mutexd;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/** The token presented: its name in the tokens file ({@code null} with authorization off) and its scopes. */
public record Whoami(String name, List<String> scopes) {

    static Whoami from(Map<String, Object> m) {
        List<String> scopes = new ArrayList<>();
        for (Object o : Types.list(m.get("scopes"))) {
            scopes.add(String.valueOf(o));
        }
        return new Whoami(Types.str(m, "name"), List.copyOf(scopes));
    }
}
