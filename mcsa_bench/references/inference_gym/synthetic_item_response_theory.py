"""Inference Gym's ``synthetic_item_response_theory`` (targets/item_response_theory.py,
``SyntheticItemResponseTheory``): a one-parameter logistic item-response model of 400 students answering
a subset of 100 questions, 30,012 answers simulated from the model's prior.

    mean_student_ability ~ N(0.75, 1), centered_student_ability_i ~ N(0, 1) (400),
    question_difficulty_j ~ N(0, 1) (100)
    correct_ij ~ Bernoulli(logit = mean_student_ability + centered_student_ability_i - question_difficulty_j)

501 latents. The data are the Gym's parallel arrays of (student, question, answer), every pair once.
"""

import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist


def model(num_students, num_questions, student_ids, question_ids, correct):
    mean_ability = numpyro.sample("mean_student_ability", dist.Normal(0.75, 1.0))
    ability = numpyro.sample("centered_student_ability", dist.Normal(0.0, 1.0).expand([num_students]).to_event(1))
    difficulty = numpyro.sample("question_difficulty", dist.Normal(0.0, 1.0).expand([num_questions]).to_event(1))
    logits = mean_ability + ability[jnp.asarray(student_ids)] - difficulty[jnp.asarray(question_ids)]
    numpyro.sample("correct", dist.Bernoulli(logits=logits).to_event(1), obs=jnp.asarray(correct))
