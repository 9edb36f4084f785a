//! The express connection against a real server: used by a lone
//! caller, closed by a cancelled request, bound to its main connection.

use super::*;
use redlease_testkit::RedisNode;

const TIMEOUT: Duration = Duration::from_secs(2);

fn main_conn(url: &str) -> ServerConn {
    let client = Client::open(url).unwrap();
    let db = client.get_connection_info().redis_settings().db();
    let registry = Arc::new(ServerRegistry::default());
    ServerConn::new(
        Finder::Address(client),
        db,
        TIMEOUT,
        Some((registry, 0)),
        true,
    )
}

fn served(conn: &ServerConn) -> u64 {
    conn.shared.express.as_ref().unwrap().served()
}

/// Sends `PING`s until one went over the express connection (at most
/// 200, 10 ms apart).
async fn until_express(conn: &ServerConn) {
    for _ in 0..200 {
        let before = served(conn);
        conn.send(&redis::cmd("PING")).await.unwrap();
        if served(conn) > before {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the express connection was never used");
}

async fn client_id(conn: &ServerConn) -> i64 {
    let before = served(conn);
    let id = conn.send(redis::cmd("CLIENT").arg("ID")).await.unwrap();
    assert_eq!(
        served(conn),
        before + 1,
        "CLIENT ID went over the main connection"
    );
    redis::from_redis_value(id).unwrap()
}

fn client_ids(node: &RedisNode) -> Vec<i64> {
    let mut admin = node.client().get_connection().unwrap();
    let list: String = redis::cmd("CLIENT").arg("LIST").query(&mut admin).unwrap();
    list.lines()
        .filter_map(|line| line.strip_prefix("id=")?.split(' ').next()?.parse().ok())
        .collect()
}

#[tokio::test]
async fn a_lone_caller_sends_every_request_on_the_express_connection() {
    let node = RedisNode::start();
    let conn = main_conn(&node.url());
    until_express(&conn).await;
    let before = served(&conn);
    for i in 0..20 {
        let echoed = conn.send(redis::cmd("ECHO").arg(i)).await.unwrap();
        assert_eq!(echoed, Value::BulkString(i.to_string().into_bytes()));
    }
    let mut pipe = redis::pipe();
    pipe.cmd("SET")
        .arg("k")
        .arg("v")
        .cmd("GET")
        .arg("k")
        .cmd("ECHO")
        .arg("z");
    let replies = conn.send_pipeline(&pipe, 1, 2).await.unwrap();
    assert_eq!(
        replies,
        vec![
            Value::BulkString(b"v".to_vec()),
            Value::BulkString(b"z".to_vec())
        ]
    );
    assert_eq!(served(&conn), before + 21);
    // An error reply leaves the connection in use.
    let refused = conn.send(&redis::cmd("NO-SUCH-COMMAND")).await.unwrap();
    assert!(matches!(refused, Value::ServerError(_)), "{refused:?}");
    let id = client_id(&conn).await;
    assert_eq!(client_id(&conn).await, id);
}

/// A main connection to `node` whose express connection is in use, and
/// that one's client id.
async fn express_in_use(node: &RedisNode) -> (ServerConn, i64) {
    let conn = main_conn(&node.url());
    until_express(&conn).await;
    let id = client_id(&conn).await;
    (conn, id)
}

#[tokio::test]
async fn a_cancelled_request_closes_the_express_connection() {
    let node = RedisNode::start();
    let (conn, id) = express_in_use(&node).await;
    let blpop = redis::cmd("BLPOP").arg("list").arg(5).clone();
    let blocked = conn.send(&blpop);
    assert!(tokio::time::timeout(Duration::from_millis(100), blocked)
        .await
        .is_err());
    // Had the connection stayed open, its BLPOP would take this value.
    let mut admin = node
        .client()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let _: () = redis::cmd("RPUSH")
        .arg("list")
        .arg("v")
        .query_async(&mut admin)
        .await
        .unwrap();
    let echoed = conn.send(redis::cmd("ECHO").arg("after")).await.unwrap();
    assert_eq!(echoed, Value::BulkString(b"after".to_vec()));
    let len: i64 = redis::cmd("LLEN")
        .arg("list")
        .query_async(&mut admin)
        .await
        .unwrap();
    assert_eq!(len, 1, "a cancelled BLPOP's connection was left open");
    assert!(!client_ids(&node).contains(&id));
    // And a new one opens.
    until_express(&conn).await;
    assert_ne!(client_id(&conn).await, id);
}

#[tokio::test]
async fn a_replaced_main_connection_takes_a_new_express_connection() {
    let node = RedisNode::start();
    let (conn, id) = express_in_use(&node).await;
    let generation = lock(&conn.shared.current).as_ref().unwrap().generation;
    conn.check(generation, Outcome::Broken);
    // The next requests go over the new main connection until a new
    // express connection is open; the old one is never used again.
    until_express(&conn).await;
    let new_id = client_id(&conn).await;
    assert_ne!(new_id, id);
    assert!(!client_ids(&node).contains(&id));
}

// Two workers: the main connection's runtime must run while the test's
// thread waits for the other runtime's thread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_runtime_takes_the_main_connection() {
    let node = RedisNode::start();
    let conn = main_conn(&node.url());
    until_express(&conn).await;
    let before = served(&conn);
    let theirs = conn.clone();
    let echoed = tokio::task::spawn_blocking(move || {
        let other = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        other.block_on(theirs.send(redis::cmd("ECHO").arg("there")))
    })
    .await
    .unwrap();
    assert_eq!(echoed.unwrap(), Value::BulkString(b"there".to_vec()));
    assert_eq!(
        served(&conn),
        before,
        "the express connection served another runtime"
    );
    // Its own runtime still has it.
    client_id(&conn).await;
}

#[tokio::test]
async fn the_express_connection_logs_in_and_selects_the_database() {
    let node = RedisNode::start();
    let mut admin = node.client().get_connection().unwrap();
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("locker")
        .arg("on")
        .arg(">secret")
        .arg("~*")
        .arg("+@all")
        .query(&mut admin)
        .unwrap();
    let url = format!("redis://locker:secret@{}/3", node.addr());
    let conn = main_conn(&url);
    until_express(&conn).await;
    let before = served(&conn);
    let set = redis::cmd("SET").arg("k").arg("v").clone();
    assert_eq!(conn.send(&set).await.unwrap(), Value::Okay);
    assert_eq!(served(&conn), before + 1);
    let whoami = conn.send(redis::cmd("ACL").arg("WHOAMI")).await.unwrap();
    assert_eq!(whoami, Value::BulkString(b"locker".to_vec()));
    let mut in_db_3 = Client::open(format!("redis://{}/3", node.addr()))
        .unwrap()
        .get_connection()
        .unwrap();
    let in_3: Option<String> = redis::cmd("GET").arg("k").query(&mut in_db_3).unwrap();
    assert_eq!(in_3.as_deref(), Some("v"));
    let in_0: Option<String> = redis::cmd("GET").arg("k").query(&mut admin).unwrap();
    assert_eq!(in_0, None);
}

#[tokio::test]
async fn an_express_connection_to_another_server_process_is_refused() {
    let node = RedisNode::start();
    let target = express::Target::of(&node.client()).unwrap();
    let opened = express::Lane::open(&target, 0, "not-this-server", TIMEOUT).await;
    let error = opened.err().expect("opened to the wrong server");
    assert!(
        error.to_string().contains("another server process"),
        "{error}"
    );
}
