//! Hugging Face text-embeddings-inference's API, for clients written against TEI
//! (`huggingface_hub`'s `feature_extraction`, LangChain's and LlamaIndex's TEI embeddings):
//! `POST /embed`, through the same rules and batcher as `/v1/embeddings`, and `POST /rerank`.

pub mod embed;
pub mod rerank;
