import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Array;
import java.sql.Connection;
import java.sql.Date;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.util.Properties;

/**
 * pgjdbc runs the shared statements (bench/bi_clients/statements.py) as Metabase and Looker bind them:
 * a PreparedStatement per statement with setString / setInt / setDate / setArray.
 * Input, a line per statement: name TAB sql-with-? TAB params joined by \u001f, each "tag:value"
 * (tags text, int, date, text[], int[], date[]; array items comma-separated).
 * Output: "R" TAB name TAB cells joined by \u001f per row, "E" TAB name TAB sqlstate TAB message on an error.
 * Usage: java -cp postgresql.jar:DIR JdbcStatements JDBC_URL USER PASSWORD FILE
 */
public class JdbcStatements {
    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.setProperty("user", args[1]);
        props.setProperty("password", args[2]);
        try (Connection conn = DriverManager.getConnection(args[0], props)) {
            for (String line : Files.readAllLines(Path.of(args[3]))) {
                String[] parts = line.split("\t", -1);
                try (PreparedStatement ps = conn.prepareStatement(parts[1])) {
                    String[] params = parts[2].isEmpty() ? new String[0] : parts[2].split("\u001f", -1);
                    for (int i = 0; i < params.length; i++) {
                        bind(conn, ps, i + 1, params[i]);
                    }
                    try (ResultSet rs = ps.executeQuery()) {
                        int n = rs.getMetaData().getColumnCount();
                        while (rs.next()) {
                            StringBuilder row = new StringBuilder("R\t").append(parts[0]).append('\t');
                            for (int c = 1; c <= n; c++) {
                                row.append(c > 1 ? "\u001f" : "").append(rs.getString(c));
                            }
                            System.out.println(row);
                        }
                    }
                } catch (SQLException e) {
                    String message = String.valueOf(e.getMessage()).replace('\n', ' ').replace('\t', ' ');
                    System.out.println("E\t" + parts[0] + "\t" + e.getSQLState() + "\t" + message);
                }
            }
        }
    }

    private static void bind(Connection conn, PreparedStatement ps, int index, String param) throws SQLException {
        int colon = param.indexOf(':');
        String tag = param.substring(0, colon);
        String value = param.substring(colon + 1);
        switch (tag) {
            case "int" -> ps.setInt(index, Integer.parseInt(value));
            case "date" -> ps.setDate(index, Date.valueOf(value));
            case "text[]" -> ps.setArray(index, conn.createArrayOf("text", value.split(",")));
            case "int[]" -> {
                String[] items = value.split(",");
                Integer[] ints = new Integer[items.length];
                for (int i = 0; i < items.length; i++) {
                    ints[i] = Integer.parseInt(items[i]);
                }
                ps.setArray(index, conn.createArrayOf("int4", ints));
            }
            case "date[]" -> {
                String[] items = value.split(",");
                Date[] dates = new Date[items.length];
                for (int i = 0; i < items.length; i++) {
                    dates[i] = Date.valueOf(items[i]);
                }
                Array array = conn.createArrayOf("date", dates);
                ps.setArray(index, array);
            }
            default -> ps.setString(index, value);
        }
    }
}
