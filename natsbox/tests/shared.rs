//! Accounts on the process's shared nats-server: separate subject spaces and JetStreams, cleaned
//! before reuse, taken back from a client that outstays its test. (This file is a process of its
//! own, so these tests share only each other's server.)

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use natsbox::{Backend, Isolation, NatsConfig, SharedAccount};

fn config() -> NatsConfig {
    NatsConfig {
        backend: Backend::Binary,
        isolation: Isolation::Account,
        ..Default::default()
    }
}

async fn account() -> SharedAccount {
    SharedAccount::acquire(&config())
        .await
        .expect("an account")
        .expect("the binary backend shares")
}

async fn connect(account: &SharedAccount) -> async_nats::Client {
    account
        .apply(async_nats::ConnectOptions::new())
        .connect(account.server_url())
        .await
        .expect("the account's user logs in")
}

async fn stream_names(client: &async_nats::Client) -> Vec<String> {
    async_nats::jetstream::new(client.clone())
        .stream_names()
        .try_collect()
        .await
        .unwrap()
}

#[tokio::test]
async fn two_accounts_share_names_and_see_nothing_of_each_other() {
    let (a, b) = (account().await, account().await);
    assert_ne!(a.name(), b.name());
    assert_eq!(a.server_url(), b.server_url(), "one server");
    let (ca, cb) = (connect(&a).await, connect(&b).await);
    let mut sub_a = ca.subscribe("triggers.v2.>").await.unwrap();
    let mut sub_b = cb.subscribe("triggers.v2.>").await.unwrap();
    for (client, stream) in [(&ca, "A_ONLY"), (&cb, "B_ONLY")] {
        let js = async_nats::jetstream::new(client.clone());
        js.create_stream(async_nats::jetstream::stream::Config {
            name: "SAME".into(),
            subjects: vec!["same.>".into()],
            ..Default::default()
        })
        .await
        .unwrap();
        js.create_stream(async_nats::jetstream::stream::Config {
            name: stream.into(),
            ..Default::default()
        })
        .await
        .unwrap_or_else(|e| panic!("{e}: {}", a.log()));
    }
    ca.publish("triggers.v2.x", "from a".into()).await.unwrap();
    cb.publish("triggers.v2.x", "from b".into()).await.unwrap();
    ca.flush().await.unwrap();
    cb.flush().await.unwrap();
    let got_a = sub_a.next().await.unwrap();
    let got_b = sub_b.next().await.unwrap();
    assert_eq!(&got_a.payload[..], b"from a");
    assert_eq!(&got_b.payload[..], b"from b");
    // A marker published after: if a's message had reached b, b would see it before the marker.
    cb.publish("triggers.v2.marker", "m".into()).await.unwrap();
    assert_eq!(
        sub_b.next().await.unwrap().subject.as_str(),
        "triggers.v2.marker"
    );
    let names_a: Result<Vec<String>, _> = async_nats::jetstream::new(ca.clone())
        .stream_names()
        .try_collect()
        .await;
    let mut names_a = names_a.unwrap_or_else(|e| panic!("{e}: {}", a.log()));
    names_a.sort();
    assert_eq!(names_a, ["A_ONLY", "SAME"]);
}

#[tokio::test]
async fn nobody_gets_in_without_the_urls_credentials() {
    let a = account().await;
    let refused = async_nats::ConnectOptions::new()
        .max_reconnects(Some(1))
        .connect(a.server_url())
        .await;
    assert!(refused.is_err(), "an anonymous client was admitted");
    assert!(a.url().contains('@') && a.url().starts_with("nats://t"));
}

/// A released account comes back without the streams of its last user.
#[tokio::test]
async fn a_released_account_comes_back_clean() {
    let first = account().await;
    let name = first.name();
    {
        let client = connect(&first).await;
        let js = async_nats::jetstream::new(client.clone());
        js.create_stream(async_nats::jetstream::stream::Config {
            name: "LEFTOVER".into(),
            subjects: vec!["left.>".into()],
            ..Default::default()
        })
        .await
        .unwrap();
        js.create_key_value(async_nats::jetstream::kv::Config {
            bucket: "leftover".into(),
            ..Default::default()
        })
        .await
        .unwrap();
        client.drain().await.unwrap();
    }
    drop(first);
    let again = same_account_again(&name).await;
    let client = connect(&again).await;
    assert!(stream_names(&client).await.is_empty(), "streams left over");
}

/// An account whose connection outstays its test is never given out again.
#[tokio::test]
async fn an_account_a_client_outstays_is_not_reused() {
    let first = account().await;
    let name = first.name();
    let lingering = connect(&first).await;
    let _overhearing = lingering.subscribe(">").await.unwrap();
    let lost_before = first.lost().await;
    drop(first); // the test ends; its connection does not
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let probe = account().await;
        assert_ne!(
            probe.name(),
            name,
            "the account was given out with a client in it"
        );
        if probe.lost().await > lost_before {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the account was never given up"
        );
        drop(probe);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Takes accounts until `name` comes back (its cleaning runs in the background); the others go
/// back when this returns.
async fn same_account_again(name: &str) -> SharedAccount {
    let mut held = Vec::new();
    tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let next = account().await;
            if next.name() == name {
                break next;
            }
            held.push(next);
            if held.len() > 20 {
                held.clear();
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    })
    .await
    .expect("the released account comes back")
}
