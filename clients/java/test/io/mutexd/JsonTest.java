package io.mutexd;

import java.math.BigInteger;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

final class JsonTest {
    private JsonTest() {
    }

    static void testRoundTrip() {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("s", "a\"b\\c\n\u0001é😀");
        m.put("n", -1L);
        m.put("l", List.of(1L, 2.5, true, false));
        m.put("z", null);
        String text = Json.write(m);
        T.eq("{\"s\":\"a\\\"b\\\\c\\n\\u0001é😀\",\"n\":-1,\"l\":[1,2.5,true,false],\"z\":null}", text, "written");
        T.eq(m, Json.parse(text), "read back");
    }

    static void testNumbersAndEscapes() {
        T.eq(new BigInteger("18446744073709551615"), Json.parse("18446744073709551615"), "a token above Long.MAX_VALUE");
        T.eq(-12L, Json.parse(" -12 "), "a negative integer");
        T.eq(1.5e3, Json.parse("1.5e3"), "an exponent");
        T.eq("\u00e9A/", Json.parse("\"\\u00e9\\u0041\\/\""), "escapes");
        for (String bad : new String[] {"", "{", "[1,]", "01", "\"\u0001\"", "{\"a\" 1}", "tru", "1 2", "\"\\x\""}) {
            T.expect(IllegalArgumentException.class, () -> Json.parse(bad));
        }
    }
}
