import java.sql.Connection;
import java.sql.DatabaseMetaData;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.ResultSetMetaData;
import java.util.Properties;

/**
 * What Metabase and Looker do through pgjdbc, printed line by line for tests/test_wire.py:
 * DatabaseMetaData.getTables / getColumns / getTablePrivileges / getPrimaryKeys, a prepared statement
 * with a parameter.
 * Usage: java -cp postgresql.jar:DIR WireProbe JDBC_URL USER PASSWORD SQL_WITH_ONE_INT_PARAMETER VALUE
 */
public class WireProbe {
    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.setProperty("user", args[1]);
        props.setProperty("password", args[2]);
        try (Connection conn = DriverManager.getConnection(args[0], props)) {
            DatabaseMetaData md = conn.getMetaData();
            System.out.println("product|" + md.getDatabaseProductName() + "|" + md.getDatabaseProductVersion());
            try (ResultSet rs = md.getTables(null, null, "%", new String[] {"TABLE", "VIEW"})) {
                while (rs.next()) {
                    System.out.println("table|" + rs.getString("TABLE_SCHEM") + "|" + rs.getString("TABLE_NAME") + "|"
                        + rs.getString("TABLE_TYPE"));
                }
            }
            try (ResultSet rs = md.getColumns(null, "public", "%", "%")) {
                while (rs.next()) {
                    System.out.println("column|" + rs.getString("TABLE_NAME") + "|" + rs.getString("COLUMN_NAME") + "|"
                        + rs.getInt("DATA_TYPE") + "|" + rs.getString("TYPE_NAME") + "|" + rs.getInt("ORDINAL_POSITION"));
                }
            }
            try (ResultSet rs = md.getTablePrivileges(null, "public", "people")) {
                while (rs.next()) {
                    System.out.println("privilege|" + rs.getString("GRANTEE") + "|" + rs.getString("PRIVILEGE"));
                }
            }
            try (ResultSet rs = md.getPrimaryKeys(null, "public", "people")) {
                while (rs.next()) {
                    System.out.println("pk|" + rs.getString("COLUMN_NAME"));
                }
            }
            try (ResultSet rs = md.getTypeInfo()) {  // DBeaver's and Metabase's type listing
                int types = 0;
                boolean int4 = false;
                while (rs.next()) {
                    types++;
                    int4 |= "int4".equals(rs.getString("TYPE_NAME"));
                }
                System.out.println("typeinfo|" + types + "|" + int4);
            }
            try (PreparedStatement ps = conn.prepareStatement(args[3])) {
                ps.setInt(1, Integer.parseInt(args[4]));
                try (ResultSet rs = ps.executeQuery()) {
                    ResultSetMetaData meta = rs.getMetaData();
                    StringBuilder head = new StringBuilder("header");
                    for (int i = 1; i <= meta.getColumnCount(); i++) {
                        head.append('|').append(meta.getColumnName(i)).append(':').append(meta.getColumnTypeName(i));
                    }
                    System.out.println(head);
                    while (rs.next()) {
                        StringBuilder row = new StringBuilder("row");
                        for (int i = 1; i <= meta.getColumnCount(); i++) {
                            row.append('|').append(rs.getString(i));
                        }
                        System.out.println(row);
                    }
                }
            }
        }
    }
}
