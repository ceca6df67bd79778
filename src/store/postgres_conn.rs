//! Connections to Postgres for the threads the store owns: one that reconnects when it finds
//! itself closed and keeps its prepared statements ([`PgConn`]), and pools of threads, each
//! with its own connection, that callers hand their queries to ([`PgReaders`]).
//!
//! Why threads: the sync `postgres` client blocks on a runtime of its own and must not run on
//! an async runtime's thread (see `postgres.rs`).

use std::collections::HashMap;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use postgres::{Client, NoTls, Statement};

use super::postgres::{backend, pg_error};
use super::StoreError;
use crate::sync::LockExt;

/// A connection that reconnects when it finds itself closed, with its prepared statements.
pub(super) struct PgConn {
    config: postgres::Config,
    target: String,
    client: Option<Client>,
    statements: HashMap<&'static str, Statement>,
}

impl PgConn {
    pub(super) fn new(config: postgres::Config, target: String) -> Self {
        PgConn {
            config,
            target,
            client: None,
            statements: HashMap::new(),
        }
    }

    /// The open client, connecting first if there is none or it was closed.
    pub(super) fn client(&mut self) -> Result<&mut Client, StoreError> {
        if self.client.as_ref().is_none_or(Client::is_closed) {
            self.client = None;
            self.statements.clear();
            let client = self.config.connect(NoTls).map_err(|e| {
                StoreError::Backend(format!(
                    "cannot connect to Postgres at {}: {}",
                    self.target,
                    pg_error(&e)
                ))
            })?;
            self.client = Some(client);
        }
        self.client
            .as_mut()
            .ok_or_else(|| StoreError::Backend("no Postgres connection".into()))
    }

    /// A statement prepared once per connection.
    pub(super) fn prepared(
        &mut self,
        sql: &'static str,
    ) -> Result<(&mut Client, Statement), StoreError> {
        self.client()?;
        let client = self
            .client
            .as_mut()
            .ok_or_else(|| StoreError::Backend("no Postgres connection".into()))?;
        let statement = match self.statements.get(sql) {
            Some(statement) => statement.clone(),
            None => {
                let statement = client.prepare(sql).map_err(backend)?;
                self.statements.insert(sql, statement.clone());
                statement
            }
        };
        Ok((client, statement))
    }
}

type Job = Box<dyn FnOnce(&mut PgConn) + Send>;

/// Reader threads, each with its own connection, taking queries from one queue.
pub(super) struct PgReaders {
    jobs: Option<Sender<Job>>,
    threads: Vec<JoinHandle<()>>,
}

impl PgReaders {
    /// `count` threads named `codebuffd-postgres-<name>-<n>`, each with its own connection.
    pub(super) fn start_named(
        config: &postgres::Config,
        target: &str,
        count: usize,
        name: &str,
    ) -> Result<Self, StoreError> {
        let (jobs, queue) = mpsc::channel::<Job>();
        let queue = Arc::new(Mutex::new(queue));
        let mut threads = Vec::with_capacity(count);
        for n in 0..count {
            let mut conn = PgConn::new(config.clone(), target.to_owned());
            let queue = queue.clone();
            let thread = std::thread::Builder::new()
                .name(format!("codebuffd-postgres-{name}-{n}"))
                .spawn(move || serve(&queue, &mut conn))
                .map_err(|e| StoreError::Backend(format!("cannot start a Postgres reader: {e}")))?;
            threads.push(thread);
        }
        Ok(PgReaders {
            jobs: Some(jobs),
            threads,
        })
    }

    /// Runs `query` on a reader thread and waits for its answer.
    pub(super) fn call<T: Send + 'static>(
        &self,
        query: impl FnOnce(&mut PgConn) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let stopped = || StoreError::Backend("the Postgres readers have stopped".into());
        let (done, answer) = mpsc::sync_channel(1);
        let job: Job = Box::new(move |conn| {
            let _ = done.send(query(conn));
        });
        self.jobs
            .as_ref()
            .ok_or_else(stopped)?
            .send(job)
            .map_err(|_| stopped())?;
        answer.recv().map_err(|_| stopped())?
    }
}

fn serve(queue: &Mutex<Receiver<Job>>, conn: &mut PgConn) {
    loop {
        let job = queue.lock_unpoisoned().recv();
        match job {
            Ok(job) => job(conn),
            Err(_) => return,
        }
    }
}

impl Drop for PgReaders {
    fn drop(&mut self) {
        self.jobs = None;
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}
