//! The CustomMethods actor: owns the user-defined methods (`ServerBuilder::method`) and runs
//! each call in its own task. Every request whose method no built-in handler owns comes here
//! (an unknown method is answered -32601 here).

use crate::context::RequestContext;
use crate::reply::Reply;
use crate::tool::BoxFuture;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use serde_json::value::RawValue;
use std::collections::HashMap;
use std::sync::Arc;
use toolyard_proto::ErrorObject;

/// A user-defined method: raw params in, JSON result out.
pub type MethodFn = Arc<
    dyn Fn(
            RequestContext,
            Option<Box<RawValue>>,
        ) -> BoxFuture<Result<serde_json::Value, ErrorObject>>
        + Send
        + Sync,
>;

/// Messages of the CustomMethods actor.
// Request variants are large and frequent, the others small and rare: boxing the frequent
// one would add an allocation per request to save memory on rare messages.
#[allow(clippy::large_enum_variant)]
pub(crate) enum CustomMsg {
    /// A method no built-in handler owns.
    Other {
        /// Method name.
        method: String,
        /// Raw params.
        params: Option<Box<RawValue>>,
        /// Context.
        ctx: RequestContext,
        /// Answer.
        reply: Reply,
    },
    /// Add a custom method.
    AddMethod(String, MethodFn),
}

pub(crate) struct CustomMethods;

pub(crate) struct CustomState {
    pub(crate) methods: HashMap<String, MethodFn>,
}

impl Actor for CustomMethods {
    type Msg = CustomMsg;
    type State = CustomState;
    type Arguments = CustomState;

    async fn pre_start(
        &self,
        _myself: ActorRef<CustomMsg>,
        args: CustomState,
    ) -> Result<CustomState, ActorProcessingErr> {
        Ok(args)
    }

    async fn handle(
        &self,
        _myself: ActorRef<CustomMsg>,
        msg: CustomMsg,
        state: &mut CustomState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            CustomMsg::AddMethod(name, f) => {
                state.methods.insert(name, f);
            }
            CustomMsg::Other {
                method,
                params,
                ctx,
                reply,
            } => match state.methods.get(&method) {
                None => reply.err(ErrorObject::method_not_found(&method)),
                Some(f) => {
                    let fut = f(ctx.clone(), params);
                    tokio::spawn(async move {
                        tokio::select! {
                            r = fut => match r {
                                Ok(v) => reply.ok(&v),
                                Err(e) => reply.err(e),
                            },
                            _ = ctx.cancelled() => reply.cancelled(),
                        }
                    });
                }
            },
        }
        Ok(())
    }
}
