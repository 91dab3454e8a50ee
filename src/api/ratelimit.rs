//! The per-token rate limit on authenticated routes: `--rate-limit-per-minute` with a
//! burst of `--rate-limit-burst`, as a GCRA (the algorithm governor implements).
//!
//! Fleet-wide by default (issue 52): each token's GCRA state, its "theoretical arrival
//! time", lives in one row of the database every replica shares (`rate_limits`), moved on
//! by one conditional upsert per request, so N replicas allow what one allows (before,
//! two replicas let 60 of 100 requests through a 30-request limit). An in-memory
//! limiter with the same quota answers first: a request this replica alone already finds
//! over the rate is over it fleet-wide too, and is refused without a database write.
//! `--rate-limit-scope replica` keeps the in-memory limiter only, as before.

use std::num::NonZeroU32;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use sea_orm::sea_query::{Alias, Expr, Func, OnConflict, Query};
use sea_orm::{ConnectionTrait, DatabaseConnection, DbErr};

use super::ApiError;

/// Where the limit is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Scope {
    /// In the database: all replicas together.
    #[default]
    Fleet,
    /// In this process's memory only.
    Replica,
}

impl std::str::FromStr for Scope {
    type Err = String;
    fn from_str(s: &str) -> Result<Scope, String> {
        match s.trim() {
            "fleet" => Ok(Scope::Fleet),
            "replica" => Ok(Scope::Replica),
            other => Err(format!("--rate-limit-scope must be `fleet` or `replica`, not `{other}`")),
        }
    }
}

pub struct RateLimit {
    scope: Scope,
    /// Microseconds between requests at the steady rate (GCRA's emission interval).
    interval_us: i64,
    burst: i64,
    local: DefaultKeyedRateLimiter<i32>,
}

impl RateLimit {
    pub fn new(per_minute: u32, burst: u32, scope: Scope) -> RateLimit {
        let (per_minute, burst) = (per_minute.max(1), burst.max(1));
        let quota = Quota::per_minute(NonZeroU32::new(per_minute).unwrap_or(NonZeroU32::MIN)).allow_burst(NonZeroU32::new(burst).unwrap_or(NonZeroU32::MIN));
        RateLimit { scope, interval_us: 60_000_000 / i64::from(per_minute), burst: i64::from(burst), local: RateLimiter::keyed(quota) }
    }

    /// Charges one request to a token; the error says when to come back.
    pub async fn charge(&self, db: &DatabaseConnection, token_id: i32) -> Result<(), ApiError> {
        self.local.check_key(&token_id).map_err(|not_until| limited(not_until.wait_time_from(DefaultClock::default().now())))?;
        if self.scope == Scope::Replica {
            return Ok(());
        }
        match self.charge_shared(db, token_id, now_us()).await? {
            None => Ok(()),
            Some(wait) => Err(limited(wait)),
        }
    }

    /// The shared GCRA step at `now` (µs): `None` when allowed (the row moved on), else how
    /// long until the next request would be.
    async fn charge_shared(&self, db: &DatabaseConnection, token_id: i32, now: i64) -> Result<Option<Duration>, DbErr> {
        use sea_orm::sea_query::ExprTrait as _;
        let (table, tat) = (Alias::new("rate_limits"), Alias::new("tat_us"));
        let next = Func::greatest([Expr::col((table.clone(), tat.clone())), Expr::val(now)]);
        let next = Expr::expr(next).add(self.interval_us);
        // Allowed while the new arrival time is within `burst` intervals of now.
        let within = next.clone().sub(now).lte(self.burst * self.interval_us);
        let upsert = Query::insert()
            .into_table(table.clone())
            .columns([Alias::new("token_id"), tat.clone()])
            .values_panic([token_id.into(), (now + self.interval_us).into()])
            .on_conflict(OnConflict::column(Alias::new("token_id")).value(tat.clone(), next).action_and_where(within).to_owned())
            .returning_col(tat.clone())
            .to_owned();
        let backend = db.get_database_backend();
        if db.query_one_raw(backend.build(&upsert)).await?.is_some() {
            return Ok(None);
        }
        let current = Query::select().column(tat.clone()).from(table).and_where(Expr::col(Alias::new("token_id")).eq(token_id)).to_owned();
        let tat_now: i64 = match db.query_one_raw(backend.build(&current)).await? {
            Some(row) => row.try_get("", "tat_us")?,
            None => now,
        };
        let wait_us = tat_now - (self.burst - 1) * self.interval_us - now;
        Ok(Some(Duration::from_micros(std::cmp::max(wait_us, 1) as u64)))
    }
}

fn limited(wait: Duration) -> ApiError {
    ApiError::RateLimited { retry_after_secs: (wait.as_secs() + u64::from(wait.subsec_nanos() > 0)).max(1) }
}

fn now_us() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_micros() as i64).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_shared_limit_allows_the_burst_then_the_rate() {
        let db = crate::db::connect(&crate::db::DbConfig::new("sqlite::memory:")).await.unwrap();
        // 60 a minute: one a second, three at once.
        let r = RateLimit::new(60, 3, Scope::Fleet);
        let t0 = 1_000_000_000_000i64;
        for i in 0..3 {
            assert_eq!(r.charge_shared(&db, 7, t0).await.unwrap(), None, "request {i} of the burst");
        }
        let wait = r.charge_shared(&db, 7, t0).await.unwrap().expect("the fourth at once is over");
        assert_eq!(wait, Duration::from_secs(1));
        assert_eq!(r.charge_shared(&db, 8, t0).await.unwrap(), None, "another token has its own");
        assert!(r.charge_shared(&db, 7, t0 + 999_000).await.unwrap().is_some(), "not yet");
        assert_eq!(r.charge_shared(&db, 7, t0 + 1_000_000).await.unwrap(), None, "one interval later, one more");
        assert_eq!(r.charge_shared(&db, 7, t0 + 60_000_000).await.unwrap(), None, "a minute later the burst is back");
        assert_eq!(r.charge_shared(&db, 7, t0 + 60_000_000).await.unwrap(), None);
    }

    #[test]
    fn the_scope_is_named() {
        assert_eq!("fleet".parse::<Scope>(), Ok(Scope::Fleet));
        assert_eq!("replica".parse::<Scope>(), Ok(Scope::Replica));
        assert!("cluster".parse::<Scope>().unwrap_err().contains("fleet"));
    }
}
